"""The timing loops: one decision at a time (sync) or N in flight (asyncio).

Latency is measured per decision with ``time.perf_counter_ns`` around each
call. Throughput is decisions divided by the wall time of the same timed loop,
so it includes the two clock reads and the append per call (about 0.1 us,
the same for every library). In the async case each of the N worker tasks
times its own ``await``, so the latency is what one caller sees while N - 1
other decisions are in flight.

A runner's timed part is split into rounds, and the suite interleaves the
rounds of every case of a group (same backend, same key set): a burst of load
from elsewhere on the machine then lands on all of them rather than on one.
The reported rate is the median of the rounds' rates; the latency percentiles
pool every round's samples. Keys are visited round-robin, continuing across
rounds.

The process's CPU time (``time.process_time_ns``, all its threads) over each
round, divided by the decisions made, is the client's CPU cost per decision:
on Redis it separates a library's own overhead from the round trip and the
server, which dominate wall time on a slow loopback.

A call that raises is counted as an error (and still timed); the loop goes on.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns, process_time_ns

__all__ = ["AsyncRunner", "Budget", "Measurement", "Runner"]

# Decisions between two checks of the deadline: keeps the check off the hot path.
_BATCH = 64


@dataclass(frozen=True, slots=True)
class Budget:
    """How long to run one case.

    ``warmup_s`` runs first and is thrown away; when ``warmup_full_pass`` is
    set it lasts at least one pass over the keys, so the timed part starts with
    every key already known to the store (no warm-up when neither is set).
    Then ``rounds`` timed rounds of ``duration_s / rounds`` each. ``max_calls``
    caps the warm-up and each round (for smoke tests); ``None`` means run for
    the time given.
    """

    duration_s: float
    warmup_s: float
    rounds: int = 1
    warmup_full_pass: bool = True
    max_calls: int | None = None

    @property
    def round_s(self) -> float:
        return self.duration_s / self.rounds


@dataclass(frozen=True, slots=True)
class Measurement:
    calls: int
    errors: int
    denied: int
    elapsed_s: float
    per_second: float
    round_rates: tuple[float, ...]
    p50_us: float
    p99_us: float
    cpu_us: float
    first_error: str | None = None


@dataclass(slots=True)
class _Sample:
    latencies: array[int] = field(default_factory=lambda: array("q"))
    errors: int = 0
    denied: int = 0
    elapsed_ns: int = 0
    cpu_ns: int = 0
    first_error: str | None = None


def _percentile(ordered: Sequence[int], fraction: float) -> float:
    """Nearest-rank percentile of sorted nanoseconds, in microseconds."""
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[int(rank) - 1] / 1_000


def _combine(samples: Sequence[_Sample]) -> Measurement:
    ordered = sorted(value for sample in samples for value in sample.latencies)
    rates = tuple(
        len(s.latencies) / (s.elapsed_ns / 1e9) if s.elapsed_ns > 0 else 0.0 for s in samples
    )
    first = next((s.first_error for s in samples if s.first_error is not None), None)
    return Measurement(
        calls=len(ordered),
        errors=sum(s.errors for s in samples),
        denied=sum(s.denied for s in samples),
        elapsed_s=sum(s.elapsed_ns for s in samples) / 1e9,
        per_second=statistics.median(rates) if rates else 0.0,
        round_rates=rates,
        p50_us=_percentile(ordered, 0.50),
        p99_us=_percentile(ordered, 0.99),
        cpu_us=sum(s.cpu_ns for s in samples) / 1_000 / len(ordered) if ordered else 0.0,
        first_error=first,
    )


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


class Runner:
    """Times ``decide(key)`` over ``keys`` round-robin, one call at a time."""

    def __init__(self, decide: Callable[[str], object], keys: Sequence[str]) -> None:
        self.decide = decide
        self.keys = keys
        self.index = 0
        self.samples: list[_Sample] = []

    def warm_up(self, budget: Budget) -> None:
        if budget.warmup_s > 0 or budget.warmup_full_pass:
            min_calls = len(self.keys) if budget.warmup_full_pass else 0
            self._loop(budget.warmup_s, budget.max_calls, min_calls)

    def round(self, budget: Budget) -> None:
        gc.collect()
        self.samples.append(self._loop(budget.round_s, budget.max_calls, 0))

    def result(self) -> Measurement:
        return _combine(self.samples)

    def _loop(self, seconds: float, max_calls: int | None, min_calls: int) -> _Sample:
        sample = _Sample()
        record = sample.latencies.append
        decide, keys, count = self.decide, self.keys, len(self.keys)
        index = self.index
        done = 0
        limit = max_calls if max_calls is not None else -1
        cpu = process_time_ns()
        start = perf_counter_ns()
        deadline = start + int(seconds * 1e9)
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
                    sample.errors += 1
                    if sample.first_error is None:
                        sample.first_error = _describe(exc)
                end = perf_counter_ns()
                record(end - t0)
                if not allowed:
                    sample.denied += 1
                done += 1
                if done == limit:
                    break
            if done == limit or (end >= deadline and done >= min_calls):
                break
        self.index = index
        sample.elapsed_ns = end - start
        sample.cpu_ns = process_time_ns() - cpu
        return sample


class AsyncRunner:
    """Times ``await decide(key)`` with ``in_flight`` worker tasks, each one call at a time."""

    def __init__(
        self, decide: Callable[[str], Awaitable[object]], keys: Sequence[str], in_flight: int
    ) -> None:
        self.decide = decide
        self.keys = keys
        self.in_flight = in_flight
        self.index = 0
        self.samples: list[_Sample] = []

    async def warm_up(self, budget: Budget) -> None:
        if budget.warmup_s > 0 or budget.warmup_full_pass:
            min_calls = len(self.keys) if budget.warmup_full_pass else 0
            await self._loop(budget.warmup_s, budget.max_calls, min_calls)

    async def round(self, budget: Budget) -> None:
        gc.collect()
        self.samples.append(await self._loop(budget.round_s, budget.max_calls, 0))

    def result(self) -> Measurement:
        return _combine(self.samples)

    async def _loop(self, seconds: float, max_calls: int | None, min_calls: int) -> _Sample:
        sample = _Sample()
        record = sample.latencies.append
        decide, keys, count = self.decide, self.keys, len(self.keys)
        first = self.index
        limit = max_calls if max_calls is not None else -1
        cpu = process_time_ns()
        start = perf_counter_ns()
        deadline = start + int(seconds * 1e9)
        last = [start]

        async def worker() -> None:
            # Each worker takes the next key, awaits one decision, and repeats: a
            # steady ``in_flight`` decisions outstanding, like a semaphore-bounded producer.
            while True:
                done = self.index - first
                if done == limit or (last[0] >= deadline and done >= min_calls):
                    return
                self.index += 1
                key = keys[(first + done) % count]
                t0 = perf_counter_ns()
                try:
                    allowed = await decide(key)
                except Exception as exc:
                    allowed = True
                    sample.errors += 1
                    if sample.first_error is None:
                        sample.first_error = _describe(exc)
                end = perf_counter_ns()
                record(end - t0)
                last[0] = end
                if not allowed:
                    sample.denied += 1

        await asyncio.gather(*(worker() for _ in range(self.in_flight)))
        sample.elapsed_ns = perf_counter_ns() - start
        sample.cpu_ns = process_time_ns() - cpu
        return sample
