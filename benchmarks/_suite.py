"""Run every case against every key set, one at a time, and collect the rows."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import _peers, _ratewarden
from benchmarks._case import Case, Env, NotAvailableError
from benchmarks._timing import Budget, Measurement, measure_async, measure_sync

__all__ = ["KEY_SETS", "Row", "all_cases", "keys_for", "run"]

#: How many distinct keys a case spreads its decisions over (round-robin).
KEY_SETS = (1, 10_000)

#: The order of the table: backend, then key set, then ratewarden, ceilings, peers.
_BACKENDS = ("memory", "redis", "redis-async")
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
        data = asdict(self)
        if self.measurement is not None:
            data["measurement"]["per_second"] = self.measurement.per_second
        return data


def all_cases() -> list[Case]:
    found = _ratewarden.cases() + _peers.cases()
    return sorted(
        found, key=lambda c: (_BACKENDS.index(c.backend), _ROLES.index(c.role))
    )


def keys_for(count: int) -> list[str]:
    return [f"user:{i}" for i in range(count)]


def _measure(case: Case, env: Env, keys: Sequence[str], budget: Budget) -> Measurement:
    if case.setup is not None:
        subject = case.setup(env)
        try:
            return measure_sync(subject.decide, keys, budget)
        finally:
            subject.close()
    setup_async = case.setup_async
    if setup_async is None:
        raise TypeError(f"case {case.label} has no setup")

    async def main() -> Measurement:
        subject = await setup_async(env)
        try:
            return await measure_async(subject.decide, keys, budget, case.in_flight)
        finally:
            await subject.close()

    return asyncio.run(main())


def run_one(case: Case, env: Env, keys: Sequence[str], budget: Budget) -> Row:
    def row(status: str, measurement: Measurement | None = None) -> Row:
        return Row(
            case.library, case.algorithm, case.backend, case.role,
            len(keys), case.in_flight, status, measurement,
        )

    try:
        measurement = _measure(case, env, keys, budget)
    except NotAvailableError as exc:
        return row(f"not available: {exc}")
    except Exception as exc:
        return row(f"failed: {type(exc).__name__}: {exc}")
    finally:
        gc.collect()
    return row("ok", measurement)


def run(
    cases: Iterable[Case],
    env: Env,
    budget: Budget,
    *,
    key_sets: Sequence[int] = KEY_SETS,
    before_each: Callable[[Case], None] | None = None,
    progress: Callable[[Row], None] | None = None,
) -> list[Row]:
    """Run each case on each key set; ``before_each`` (e.g. FLUSHALL) runs before every one."""
    chosen = list(cases)
    rows = []
    for backend in _BACKENDS:
        for count in key_sets:
            keys = keys_for(count)
            for case in chosen:
                if case.backend != backend:
                    continue
                if before_each is not None:
                    before_each(case)
                found = run_one(case, env, keys, budget)
                rows.append(found)
                if progress is not None:
                    progress(found)
    return rows
