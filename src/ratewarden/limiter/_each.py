"""Several hits, each decided as ``hit_flow`` decides it, whose store calls are one ``Ask``.

``hit_each_flow`` is for a caller that decides several calls in place of the store
(``via``: a token budget's checks and charges) and can make their store calls
together (``via_all``: one store step in memory, one pipeline on Redis). Each call
keeps everything of its own hit: validation, the negative cache, the breaker of its
node, its failure mode, timing, the decision hook and metrics. What it changes is
only when the breaker is asked: every call's ``allow`` before the one store call, and
the verdicts after it (as when the calls run side by side under asyncio), so a
failure that opens the circuit refuses the next request's calls, not this one's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ratewarden.decision import Decision
from ratewarden.limiter._flows import Ask, Flow
from ratewarden.limiter._settings import FailureHook, Pending, algorithm_name
from ratewarden.metrics import NO_METRICS
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.limiter._core import DecisionCore

__all__ = ["EachCall", "hit_each_flow"]


class EachCall(NamedTuple):
    """One call of ``hit_each_flow``: ``hit_flow``'s arguments."""

    key: str
    rates: Rate | Sequence[Rate]
    cost: int
    failure_mode: str | None = None
    algorithm: str | None = None
    on_failure: FailureHook | None = None


#: ``via_all(positions)``: the calls at ``positions`` decided, in order, each a Decision or
#: the exception standing for it (a coroutine function under ``AsyncLimiter``).
ViaAll = Callable[[list[int]], Any]


def hit_each_flow(
    core: DecisionCore, calls: Sequence[EachCall], via_all: ViaAll
) -> Flow[list[tuple[Decision, bool]]]:
    """Each call's Decision, and whether ``via_all`` was asked for it (False: this process
    answered, from the negative cache or the open breaker's failure mode)."""
    found: list[tuple[Decision, bool] | None] = [None] * len(calls)
    asked: list[tuple[int, Pending, str]] = []
    try:
        yield from _start_each(core, calls, found, asked)
    except BaseException:
        # A later call refused (no failure mode) or interrupted: the earlier ones the
        # breaker let through are never sent, so their places (a half-open probe's) go back.
        if core.breaker is not None:
            for _, _, node in asked:
                core.breaker.abandon(node)
        raise
    if asked:
        timed = core.metrics is not NO_METRICS
        started_at = time.perf_counter() if timed else 0.0
        nodes = [node for _, _, node in asked]
        replies = yield from core._sent(Ask(via_all, ([i for i, _, _ in asked],)), *nodes)
        if isinstance(replies, Exception):  # the whole step failed: every call with it
            replies = [replies] * len(asked)
        took = time.perf_counter() - started_at if timed else 0.0
        for (_, _, node), reply in zip(asked, replies, strict=True):
            # Every call's verdict before any is raised: a probe's left unsaid keeps its
            # circuit half open for ever.
            core._verdict(reply, node)
        for (i, p, _), reply in zip(asked, replies, strict=True):
            if timed:
                core.metrics.store_latency(seconds=took)
            if isinstance(reply, Exception):
                if p.failure_mode is None or not isinstance(reply, core.failure_errors):
                    raise reply
                decision = core._degrade(p, reply)
            else:
                decision = reply
                if p.cost > 0 and not decision.allowed and core.negative is not None:
                    core.negative.remember((p.algorithm, p.key, p.rates), decision, p.now)
            found[i] = (core._finish(p.algorithm, p.key, decision, False), True)
    return [each for each in found if each is not None]


def _start_each(
    core: DecisionCore,
    calls: Sequence[EachCall],
    found: list[tuple[Decision, bool] | None],
    asked: list[tuple[int, Pending, str]],
) -> Flow[None]:
    """Start each call: answered here into ``found`` (the negative cache, a lease, the
    open breaker's failure mode), or let through by the breaker into ``asked``."""
    for i, call in enumerate(calls):
        name = core.algorithm if call.algorithm is None else algorithm_name(call.algorithm)
        started = core._start(
            name, call.key, call.rates, call.cost, call.failure_mode, call.on_failure
        )
        if type(started) is not Pending:
            found[i] = (core._finish(name, call.key, started, False), False)  # type: ignore[arg-type]
            continue
        p: Pending = started
        if p.leased:  # a lease to buy: that call on its own, as ``hit_flow`` makes it
            found[i] = (core._finish(name, p.key, (yield from core._leased(p)), False), True)
            continue
        node = core._node_of(p.key, rates=p.rates)
        refused = core._refused(node)
        if refused is not None:
            if p.failure_mode is None:
                raise refused
            found[i] = (core._finish(name, p.key, core._degrade(p, refused), False), False)
            continue
        core.counts.add("store_calls")
        asked.append((i, p, node))
