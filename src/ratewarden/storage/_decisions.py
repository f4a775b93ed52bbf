"""Outcomes into Decisions: where a store's numbers become the answer, for every store.

The memory store hands its per-layer ``Outcome``s to ``to_decision`` (``single``
for one rate; ``batch_decisions`` for ``hit_all``); a Redis store hands a
script's reply to ``decode`` (``decode_batch``, ``parse_acquire``), which reads
the same six numbers per layer into the same ``Outcome``s first. So a decision
is combined the same way whichever store made it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ratewarden.algorithms import NEVER, Outcome
from ratewarden.decision import Decision, layered_decision, make_decision
from ratewarden.rate import Rate
from ratewarden.storage import _kernel

if TYPE_CHECKING:
    from ratewarden.storage._plan import Batch

__all__ = [
    "REPLY_ERRORS",
    "REPLY_WIDTH",
    "batch_decisions",
    "decode",
    "decode_batch",
    "parse_acquire",
    "single",
    "slot_decision",
    "to_decision",
]

#: Values per layer in a script reply: allowed, remaining, reset_after_us, retry_after_us, delay_us,
#: refill_after_us.
REPLY_WIDTH = 6

#: What reading a reply of the wrong shape raises here: not a list, the wrong length, a value
#: that is no whole number where one is read. A server that speaks Redis's protocol but does
#: not run the scripts (a proxy, another RESP service) answers so; the store catches these
#: around the reading, where a try costs nothing, and raises its ``StorageError`` instead.
REPLY_ERRORS = (TypeError, ValueError, IndexError)


def _not_a_list(reply: object) -> TypeError:
    return TypeError(f"a script's reply is a list of numbers, not {type(reply).__name__}")


def _length(reply: Sequence[object], expected: int) -> ValueError:
    return ValueError(f"a reply of {len(reply)} values where the script sends {expected}")


def decode(rates: Sequence[Rate], cost: int, reply: Sequence[int]) -> Decision:
    """Turn a script's ``{now_us, allowed, per layer: 6 numbers}`` into the Decision of a call
    with these rates and cost (a ``Plan``'s or a ``Shape``'s).

    Raises one of ``REPLY_ERRORS`` for a list of another shape. The reply is a list: the
    routers refuse any other reply to a script (``_redis_sync.run_script``), on the test of
    its type they make anyway for an error reply, so none is made here (a string would index
    as numbers)."""
    if len(rates) == 1:
        # The script's numbers are integers already (hiredis makes them ints); unpacking
        # checks the length, ``single`` that the times are numbers.
        _, _, allowed, remaining, reset_us, retry_us, delay_us, refill_us = reply
        outcome = (allowed != 0, remaining, reset_us, retry_us, delay_us, refill_us)
        return single(rates[0], outcome, cost)
    if len(reply) != 2 + REPLY_WIDTH * len(rates):
        raise _length(reply, 2 + REPLY_WIDTH * len(rates))
    values = [int(v) for v in reply]
    outcomes = [_outcome(values, i) for i in range(2, 2 + REPLY_WIDTH * len(rates), REPLY_WIDTH)]
    return to_decision(rates, outcomes, cost)


def _outcome(values: list[int], i: int) -> Outcome:
    """The layer whose six numbers start at ``values[i]``."""
    return Outcome(bool(values[i]), *values[i + 1 : i + REPLY_WIDTH])


def _seconds(us: int) -> float:
    return math.inf if us == NEVER else us / 1_000_000


def _layer(rate: Rate, outcome: Outcome, cost: int) -> Decision:
    allowed, remaining, reset_after_us, retry_after_us, delay_us, refill_after_us = outcome
    return make_decision(
        allowed,
        rate.limit,
        remaining,
        _seconds(reset_after_us),
        _seconds(retry_after_us),
        _seconds(delay_us),
        rate,
        cost,
        (),
        False,
        "",
        refill_after_us / 1_000_000,
    )


def _single(rate: Rate, outcome: tuple[bool, int, int, int, int, int], cost: int) -> Decision:
    """The decision of a one-rate call: its only layer binds, and lists itself in ``layers``.

    The reference of ``single``, which is built in C when the kernel is (see below)."""
    allowed, remaining, reset_us, retry_us, delay_us, refill_us = outcome
    reset = math.inf if reset_us == NEVER else reset_us / 1_000_000
    retry = math.inf if retry_us == NEVER else retry_us / 1_000_000
    delay = 0.0 if not delay_us else math.inf if delay_us == NEVER else delay_us / 1_000_000
    refill = refill_us / 1_000_000
    limit = rate.limit
    # The same fields twice: the layer (no layers of its own), then the call listing it.
    layer = make_decision(
        allowed, limit, remaining, reset, retry, delay, rate, cost, (), False, "", refill
    )
    return make_decision(
        allowed, limit, remaining, reset, retry, delay, rate, cost, (layer,), False, "", refill
    )


#: ``single(rate, outcome, cost)``: the decision of a one-rate call. With the C kernel built
#: (``ratewarden.storage._speedups``), its ``DecisionMaker`` builds the same two Decisions in
#: their slots (the same fields, the same floats) and hands any outcome that is not six whole
#: numbers of microseconds within 2**53 to ``_single``; without it, or with
#: ``RATEWARDEN_PURE=1``, it is ``_single``, the reference.
single: Callable[[Rate, tuple[bool, int, int, int, int, int], int], Decision] = (
    _single
    if _kernel.speedups is None
    else _kernel.speedups.DecisionMaker(decision_type=Decision, fallback=_single).single
)


def to_decision(rates: Sequence[Rate], outcomes: Sequence[Outcome], cost: int) -> Decision:
    """Combine layers: the binding layer speaks for the decision (see ``Decision``)."""
    if len(rates) == 1:
        return single(rates[0], outcomes[0], cost)
    layers = tuple(_layer(r, o, cost) for r, o in zip(rates, outcomes, strict=True))
    return layered_decision(layers, cost)


def batch_decisions(found: Batch, outcomes: Sequence[Outcome], admitted: bool) -> list[Decision]:
    """One Decision per call from every layer's outcome, in call order.

    When the batch was not admitted, nothing was consumed: a call that would
    have passed on its own is reported as the check it became (allowed, cost 0).
    """
    decisions = []
    at = 0
    for _, shape in found:
        mine = outcomes[at : at + len(shape.rates)]
        at += len(shape.rates)
        charged = admitted or not all(outcome.allowed for outcome in mine)
        decisions.append(to_decision(shape.rates, mine, shape.cost if charged else 0))
    return decisions


def _decode_batch(found: Batch, reply: Sequence[int]) -> list[Decision]:
    """``batch_decisions`` from a script's reply ``{now_us, admitted, per layer: 6 numbers}``.

    The reference of ``decode_batch``, which is built in C when the kernel is (see below).
    Raises one of ``REPLY_ERRORS`` for a reply of another shape."""
    if (
        type(reply) is not list
        or len(reply) != 2 + REPLY_WIDTH * len(found)
        or not all(s.single for _, s in found)
    ):
        if type(reply) is not list:
            raise _not_a_list(reply)
        expected = 2 + REPLY_WIDTH * sum(len(shape.rates) for _, shape in found)
        if len(reply) != expected:
            raise _length(reply, expected)
        ints = [int(value) for value in reply]
        outcomes = [_outcome(ints, i) for i in range(2, len(ints), REPLY_WIDTH)]
        return batch_decisions(found, outcomes, ints[1] == 1)
    # One rate a call (the common case): each call's six numbers straight into ``single``,
    # as ``decode`` reads them (integers already: hiredis makes them ints).
    values = reply
    admitted = values[1] == 1
    decisions = []
    at = 2
    for _, shape in found:
        allowed = values[at] != 0
        outcome = (
            allowed,
            values[at + 1],
            values[at + 2],
            values[at + 3],
            values[at + 4],
            values[at + 5],
        )
        decisions.append(
            single(shape.rates[0], outcome, shape.cost if admitted or not allowed else 0)
        )
        at += REPLY_WIDTH
    return decisions


#: ``decode_batch(found, reply)``: a ``hit_all``'s Decisions from its script's reply. With the C
#: kernel built, its ``BatchDecoder`` reads a reply of one-rate calls (a list of whole numbers of
#: the right length, the times within 2**53) and builds their Decisions as ``single`` does, the
#: same cost rule; any other reply or batch goes to ``_decode_batch``, which is what it is without
#: the kernel or with ``RATEWARDEN_PURE=1``: the reference.
decode_batch: Callable[[Batch, Sequence[int]], list[Decision]] = (
    _decode_batch
    if _kernel.speedups is None
    else _kernel.speedups.BatchDecoder(decision_type=Decision, fallback=_decode_batch).decode
)


def slot_decision(limit: int, slots: int, outcome: Outcome) -> Decision:
    """A Decision for a slot acquisition (no Rate: concurrency has no period)."""
    return Decision(
        allowed=outcome.allowed,
        limit=limit,
        remaining=outcome.remaining,
        reset_after=_seconds(outcome.reset_after_us),
        retry_after=_seconds(outcome.retry_after_us),
        cost=slots,
        refill_after=_seconds(outcome.refill_after_us),
    )


def parse_acquire(limit: int, slots: int, reply: Sequence[int]) -> Decision:
    """``{now_us, allowed, remaining, reset_after_us, retry_after_us, refill_after_us}`` ->
    Decision; one of ``REPLY_ERRORS`` for a reply of another shape."""
    if type(reply) is not list:
        raise _not_a_list(reply)
    if len(reply) != 6:
        raise _length(reply, 6)
    values = [int(v) for v in reply]
    outcome = Outcome(bool(values[1]), values[2], values[3], values[4], 0, values[5])
    return slot_decision(limit, slots, outcome)
