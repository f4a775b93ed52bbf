"""Run the cases group by group (memory, Redis or memcached, one key set); collect the rows.

Within a group every case is set up and warmed up first; then the timed rounds
of all of them are interleaved, in a rotating order, so that load from
elsewhere on a shared machine is spread over the cases being compared. A group
runs in one event loop: async cases await, sync cases simply block it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import _budgets, _peers, _ratewarden
from benchmarks._case import Case, Env, NotAvailableError
from benchmarks._timing import AsyncRunner, Budget, Measurement, Runner

__all__ = ["KEY_SETS", "Row", "all_cases", "keys_for", "run"]

#: How many distinct keys a case spreads its decisions over (round-robin).
KEY_SETS = (1, 10_000)

#: The order of the table: backend, then key set, then ratewarden, ceilings, peers.
_BACKENDS = ("memory", "redis", "redis-async", "memcached", "memcached-async")

#: Cases measured together (their rounds interleaved), per key set.
_GROUPS = (
    ("memory", ("memory",)),
    ("redis", ("redis", "redis-async")),
    ("memcached", ("memcached", "memcached-async")),
)
_ROLES = ("subject", "ceiling", "peer")


@dataclass(frozen=True, slots=True)
class Row:
    library: str
    algorithm: str
    backend: str
    role: str
    keys: int
    in_flight: int
    status: str
    measurement: Measurement | None = None

    @property
    def label(self) -> str:
        return f"{self.library} [{self.algorithm}]"

    @property
    def per_second(self) -> float | None:
        return None if self.measurement is None else self.measurement.per_second

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def all_cases() -> list[Case]:
    found = _ratewarden.cases() + _budgets.cases() + _peers.cases()
    return sorted(found, key=lambda c: (_BACKENDS.index(c.backend), _ROLES.index(c.role)))


def keys_for(count: int) -> list[str]:
    return [f"user:{i}" for i in range(count)]


def _row(case: Case, keys: int, status: str, measurement: Measurement | None = None) -> Row:
    return Row(
        case.library,
        case.algorithm,
        case.backend,
        case.role,
        keys,
        case.in_flight,
        status,
        measurement,
    )


def _failure(exc: Exception) -> str:
    if isinstance(exc, NotAvailableError):
        return f"not available: {exc}"
    return f"failed: {type(exc).__name__}: {exc}"


def _warn(case: Case, exc: Exception) -> None:
    print(f"warning: closing {case.label} on {case.backend}: {_failure(exc)}", file=sys.stderr)


def _rotations(count: int, rounds: int) -> list[list[int]]:
    """Case order per round, rotated so that no case always runs first after the warm-ups."""
    return [[(start + i) % count for i in range(count)] for start in range(rounds)]


async def _run_group(
    cases: Sequence[Case], env: Env, keys: Sequence[str], budget: Budget
) -> list[Row]:
    """Set up and warm every case, then interleave their rounds; sync cases block the loop."""
    runners: dict[int, Runner | AsyncRunner] = {}
    closers: dict[int, Callable[[], object]] = {}
    failed: dict[int, str] = {}
    try:
        for i, case in enumerate(cases):
            try:
                if case.setup_async is not None:
                    subject = await case.setup_async(env)
                    closers[i] = subject.close
                    runner: Runner | AsyncRunner = AsyncRunner(subject.decide, keys, case.in_flight)
                elif case.setup is not None:
                    sync_subject = case.setup(env)
                    closers[i] = sync_subject.close
                    runner = Runner(sync_subject.decide, keys)
                else:
                    raise TypeError(f"case {case.label} has no setup")
                runners[i] = runner
                await _step(runner.warm_up(budget))
            except Exception as exc:
                failed[i] = _failure(exc)
                runners.pop(i, None)
        for order in _rotations(len(cases), budget.rounds):
            for i in order:
                if i in runners:
                    await _step(runners[i].round(budget))
    finally:
        for i, close in closers.items():
            try:
                await _step(close())
            except Exception as exc:
                _warn(cases[i], exc)
    return [
        _row(case, len(keys), "ok", runners[i].result())
        if i in runners
        else _row(case, len(keys), failed[i])
        for i, case in enumerate(cases)
    ]


async def _step(result: object) -> None:
    """Await ``result`` if a coroutine (async runners and closers); sync ones already ran."""
    if isinstance(result, Awaitable):
        await result


def run(
    cases: Iterable[Case],
    env: Env,
    budget: Budget,
    *,
    key_sets: Sequence[int] = KEY_SETS,
    before_group: Callable[[str], None] | None = None,
    progress: Callable[[Row], None] | None = None,
) -> list[Row]:
    """Run the cases group by group, interleaving each group's rounds; rows in table order.

    The groups are memory, then Redis (sync and async together, so the async
    figure and the sync one it is compared with share the same moments), then
    memcached (likewise), each per key set. ``before_group(family)`` runs before
    every group (``memory``, ``redis`` or ``memcached``; scripts/bench flushes that
    server there).
    """
    chosen = list(cases)
    rows: list[Row] = []
    for family, backends in _GROUPS:
        group = [case for case in chosen if case.backend in backends]
        if not group:
            continue
        for count in key_sets:
            if before_group is not None:
                before_group(family)
            found = asyncio.run(_run_group(group, env, keys_for(count), budget))
            gc.collect()
            for row in found:
                rows.append(row)
                if progress is not None:
                    progress(row)
    order = {id(row): n for n, row in enumerate(rows)}
    return sorted(rows, key=lambda r: (_BACKENDS.index(r.backend), r.keys, order[id(r)]))
