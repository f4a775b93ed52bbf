"""The timing loops: one decision at a time (sync) or N in flight (asyncio).

Latency is measured per decision with ``time.perf_counter_ns`` around each
call. Throughput is decisions divided by the wall time of the same timed loop,
so it includes the two clock reads and the append per call (about 0.1 us,
the same for every library). In the async case each of the N worker tasks
times its own ``await``, so the latency is what one caller sees while N - 1
other decisions are in flight.

A call that raises is counted as an error (and still timed); the loop goes on.
"""

from __future__ import annotations

import asyncio
import gc
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

__all__ = ["Budget", "Measurement", "measure_async", "measure_sync"]

# Decisions between two checks of the deadline: keeps the check off the hot path.
_BATCH = 64


@dataclass(frozen=True, slots=True)
class Budget:
    """How long to run one case.

    ``warmup_s`` runs first and is thrown away; when ``warmup_full_pass`` is
    set it lasts at least one pass over the keys, so the timed part starts with
    every key already known to the store (no warm-up when neither is set).
    ``max_calls`` caps each part (for smoke tests); ``None`` means run for
    ``duration_s``.
    """

    duration_s: float
    warmup_s: float
    warmup_full_pass: bool = True
    max_calls: int | None = None


@dataclass(frozen=True, slots=True)
class Measurement:
    calls: int
    errors: int
    denied: int
    elapsed_s: float
    p50_us: float
    p99_us: float
    first_error: str | None = None

    @property
    def per_second(self) -> float:
        return self.calls / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _percentile(ordered: Sequence[int], fraction: float) -> float:
    """Nearest-rank percentile of sorted nanoseconds, in microseconds."""
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[int(rank) - 1] / 1_000


def _summarise(
    latencies: array[int], errors: int, denied: int, elapsed_ns: int, first_error: str | None
) -> Measurement:
    ordered = sorted(latencies)
    return Measurement(
        calls=len(ordered),
        errors=errors,
        denied=denied,
        elapsed_s=elapsed_ns / 1e9,
        p50_us=_percentile(ordered, 0.50),
        p99_us=_percentile(ordered, 0.99),
        first_error=first_error,
    )


def _sync_loop(
    decide: Callable[[str], object],
    keys: Sequence[str],
    duration_s: float,
    max_calls: int | None,
    min_calls: int,
) -> Measurement:
    latencies: array[int] = array("q")
    record = latencies.append
    count = len(keys)
    index = errors = denied = 0
    first_error: str | None = None
    limit = max_calls if max_calls is not None else -1
    start = perf_counter_ns()
    deadline = start + int(duration_s * 1e9)
    end = start
    while True:
        for _ in range(_BATCH):
            key = keys[index % count]
            index += 1
            t0 = perf_counter_ns()
            try:
                allowed = decide(key)
            except Exception as exc:
                allowed = True
                errors += 1
                if first_error is None:
                    first_error = f"{type(exc).__name__}: {exc}"
            end = perf_counter_ns()
            record(end - t0)
            if not allowed:
                denied += 1
            if index == limit:
                break
        if index == limit or (end >= deadline and index >= min_calls):
            break
    return _summarise(latencies, errors, denied, end - start, first_error)


def measure_sync(
    decide: Callable[[str], object], keys: Sequence[str], budget: Budget
) -> Measurement:
    """Warm up, then time ``decide(key)`` round-robin over ``keys``."""
    if budget.warmup_s > 0 or budget.warmup_full_pass:
        warm_calls = len(keys) if budget.warmup_full_pass else 0
        _sync_loop(decide, keys, budget.warmup_s, budget.max_calls, warm_calls)
        gc.collect()
    return _sync_loop(decide, keys, budget.duration_s, budget.max_calls, 0)


async def _async_loop(
    decide: Callable[[str], Awaitable[object]],
    keys: Sequence[str],
    in_flight: int,
    duration_s: float,
    max_calls: int | None,
    min_calls: int,
) -> Measurement:
    latencies: array[int] = array("q")
    record = latencies.append
    count = len(keys)
    state = {"next": 0, "errors": 0, "denied": 0, "end": 0}
    first_error: list[str] = []
    limit = max_calls if max_calls is not None else -1
    start = perf_counter_ns()
    deadline = start + int(duration_s * 1e9)

    async def worker() -> None:
        # Each worker takes the next key, awaits one decision, and repeats: a
        # steady ``in_flight`` decisions outstanding, like a semaphore-bounded producer.
        while True:
            index = state["next"]
            if index == limit or (state["end"] >= deadline and index >= min_calls):
                return
            state["next"] = index + 1
            t0 = perf_counter_ns()
            try:
                allowed = await decide(keys[index % count])
            except Exception as exc:
                allowed = True
                state["errors"] += 1
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}")
            end = perf_counter_ns()
            record(end - t0)
            state["end"] = end
            if not allowed:
                state["denied"] += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    end = perf_counter_ns()
    return _summarise(
        latencies,
        state["errors"],
        state["denied"],
        end - start,
        first_error[0] if first_error else None,
    )


async def measure_async(
    decide: Callable[[str], Awaitable[object]],
    keys: Sequence[str],
    budget: Budget,
    in_flight: int,
) -> Measurement:
    """Warm up, then time ``await decide(key)`` with ``in_flight`` worker tasks."""
    if budget.warmup_s > 0 or budget.warmup_full_pass:
        warm_calls = len(keys) if budget.warmup_full_pass else 0
        await _async_loop(decide, keys, in_flight, budget.warmup_s, budget.max_calls, warm_calls)
        gc.collect()
    return await _async_loop(decide, keys, in_flight, budget.duration_s, budget.max_calls, 0)
