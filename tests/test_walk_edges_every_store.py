"""Edges a second walk through the algorithms found, on every store (memory and Redis, sync
and async, the kernel or the pure path as the run chooses): a shaper's acquire of a cost that
can never fit says never, a sliding window's ``remaining`` is never below 0 after the clock
steps back, and the longest period a Rate takes decides alike everywhere, up to the latest
instant a ManualClock reaches."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Decision, Limiter, Rate
from ratewarden.rate import MAX_PERIOD_US
from ratewarden.testing import ManualClock
from tests._stores import STORES, Closers, close_all, make_store

#: 2024-03-01 12:00:00 UTC: a whole minute.
NOON = 1_709_294_400
#: The latest instant a ManualClock reaches, in microseconds.
LATEST_US = 2**53 - 1 - MAX_PERIOD_US


@dataclass
class Harness:
    """A limiter of either flavour behind one awaitable interface."""

    limiter: Limiter | AsyncLimiter
    clock: ManualClock

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Decision:
        result = getattr(self.limiter, method)(*args, **kwargs)
        return await result if not isinstance(result, Decision) else result

    async def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        return await self.call("hit", key, rates, cost)


@pytest.fixture(params=STORES[:4])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """``make(algorithm, clock)`` -> Harness on the parametrized store (no Cluster)."""
    flavour = request.param.split("-")[1]
    closers: Closers = []

    def factory(algorithm: str, clock: ManualClock) -> Harness:
        store = make_store(request, request.param, clock, closers)
        limiter = Limiter(store, algorithm) if flavour == "sync" else AsyncLimiter(store, algorithm)
        return Harness(limiter, clock)

    yield factory
    await close_all(closers)


async def test_a_shaper_acquire_of_a_cost_past_the_capacity_never_fits(make: Any) -> None:
    """leaky_bucket 100/minute burst 20, 20 queued: acquire(cost=21, timeout=5) is denied with
    retry_after inf, as hit and acquire without a timeout are (not 12.0, the queue's drain,
    which would send the client back to be refused again); nothing is consumed."""
    h = make("leaky_bucket", ManualClock(NOON))
    rate = Rate.parse("100/minute", burst=20)
    for _ in range(20):
        assert (await h.hit("k", rate)).allowed
    for timeout in (5, 0.05, None):
        denied = await h.call("acquire", "k", rate, 21, timeout=timeout)
        assert not denied.allowed and math.isinf(denied.retry_after)
    assert (await h.call("peek", "k", rate)).remaining == 0
    fits = await h.call("acquire", "k", rate, 1, timeout=5)  # a cost that fits still waits
    assert not fits.allowed and fits.retry_after == 12.0


async def test_a_sliding_window_never_reports_remaining_below_zero_after_a_step_back(
    make: Any,
) -> None:
    """10/minute: 10 hits in one minute, 5 at 30 s into the next, the clock 30 s back: the
    previous minute weighs 10 again (estimate 15), and remaining is 0, not -5, in a peek, a
    hit and each layer of a layered hit; the hit waits until the estimate admits it."""
    clock = ManualClock(NOON)
    h = make("sliding_window", clock)
    rate = Rate.parse("10/minute")
    for _ in range(10):
        assert (await h.hit("k", rate)).allowed
    clock.set(NOON + 90)
    for _ in range(5):
        assert (await h.hit("k", rate)).allowed
    clock.set(NOON + 60)
    peeked = await h.call("peek", "k", rate)
    assert peeked.remaining == 0
    denied = await h.hit("k", rate)
    assert (denied.allowed, denied.remaining, denied.retry_after) == (False, 0, 36.0)
    layered = await h.hit("k", [rate, Rate.parse("100/hour")])
    assert layered.remaining == 0 and [d.remaining for d in layered.layers] == [0, 100]


@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket", "sliding_window", "sliding_log"])
@pytest.mark.parametrize("start_us", [NOON * 1_000_000, LATEST_US])
async def test_the_longest_period_decides_as_the_memory_store_does(
    make: Any, algorithm: str, start_us: int
) -> None:
    """1 and 2 per 100 years (the longest period), today and at the latest instant a
    ManualClock reaches: a hit, a check of cost 0 and a second hit give the same Decisions on
    this store as on a MemoryStore (a 2**53 - 2 us period, accepted before, had Redis deny
    the check that memory allowed; it is refused now, test_rate_longest_period.py)."""
    rates = [Rate(1, timedelta(microseconds=MAX_PERIOD_US)), Rate(2, 100 * 365 * 86_400)]
    clock = ManualClock(0)
    clock.advance_us(start_us)
    h = make(algorithm, clock)
    reference = Limiter(algorithm=algorithm, clock=clock)
    for i, rate in enumerate(rates):
        got = []
        for cost in (1, 0, 1, 0):
            got.append(await h.hit(f"k{i}", rate, cost))
            assert got[-1] == reference.hit(f"k{i}", rate, cost)
        assert [d.allowed for d in got[:3]] == [True, True, rate.limit == 2]
