"""One contract, every store: memory, Redis and a 3-primary Redis Cluster, sync and async.

The worked arithmetic of each algorithm holds exactly through the public API
wherever the state lives. Time comes from a ManualClock handed to the store
(the Redis scripts then receive ``now`` instead of reading ``TIME``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from ratewarden import (
    AsyncLimiter,
    Decision,
    Limiter,
    Rate,
)
from ratewarden.limiter import Lease
from ratewarden.testing import ManualClock
from tests._stores import STORES, Closers, close_all, make_store

#: 2023-11-14 22:13:00 UTC, a whole minute, so fixed windows line up with the examples.
MINUTE_START = 1_699_999_980


@dataclass
class Harness:
    """A limiter of either flavour behind one awaitable interface."""

    limiter: Limiter | AsyncLimiter
    clock: ManualClock

    async def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        result = self.limiter.hit(key, rates, cost)
        return await result if not isinstance(result, Decision) else result

    async def peek(self, key: str, rates: Rate | Sequence[Rate]) -> Decision:
        result = self.limiter.peek(key, rates)
        return await result if not isinstance(result, Decision) else result

    async def acquire_slot(self, key: str, limit: int, ttl: float) -> Lease:
        result = self.limiter.acquire_slot(key, limit, ttl=ttl)
        return await result if not isinstance(result, Lease) else result

    async def release_slot(self, lease: Lease) -> bool:
        result = self.limiter.release_slot(lease)
        return await result if not isinstance(result, bool) else result

    async def many(self, key: str, rates: Rate | Sequence[Rate], n: int) -> list[Decision]:
        return [await self.hit(key, rates) for _ in range(n)]

    async def all_allowed(self, key: str, rates: Rate | Sequence[Rate], n: int) -> bool:
        """Whether ``n`` hits in a row are all allowed."""
        return all(d.allowed for d in await self.many(key, rates, n))

    async def denied_after(self, key: str, rates: Rate | Sequence[Rate], n: int) -> Decision:
        """The hit after ``n`` allowed ones, checked to be denied."""
        assert await self.all_allowed(key, rates, n)
        denied = await self.hit(key, rates)
        assert not denied.allowed
        return denied


@pytest.fixture(params=STORES)
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A factory: ``make(algorithm, start=...)`` -> Harness on the parametrized store."""
    flavour = request.param.split("-")[1]
    closers: Closers = []

    def factory(algorithm: str, start: float = MINUTE_START) -> Harness:
        clock = ManualClock(start)
        store = make_store(request, request.param, clock, closers)
        limiter = Limiter(store, algorithm) if flavour == "sync" else AsyncLimiter(store, algorithm)
        return Harness(limiter, clock)

    yield factory
    await close_all(closers)


async def test_gcra_burst_then_one_per_emission_interval(make: Any) -> None:
    """GCRA 100/minute burst 20: 20 pass, the 21st waits exactly 0.6 s, then one more passes."""
    h = make("gcra")
    rate = Rate.parse("100/minute", burst=20)
    decisions = await h.many("k", rate, 21)
    assert [d.allowed for d in decisions] == [True] * 20 + [False]
    assert decisions[-1].retry_after == 0.6
    h.clock.advance(0.6)
    assert (await h.hit("k", rate)).allowed
    assert not (await h.hit("k", rate)).allowed


async def test_gcra_cost_moves_by_cost_intervals_and_too_big_never_fits(make: Any) -> None:
    """Cost c moves the state by c emission intervals; a cost above the burst never fits."""
    h = make("gcra")
    rate = Rate.parse("100/minute", burst=20)
    assert (await h.hit("k", rate, 5)).remaining == 15
    too_big = await h.hit("k", rate, 21)
    assert not too_big.allowed and math.isinf(too_big.retry_after)
    denied = await h.hit("k", rate, 16)
    assert not denied.allowed and denied.retry_after == pytest.approx(0.6)


async def test_token_bucket_full_bucket_then_refill(make: Any) -> None:
    """Capacity 20, refill 100/minute: 20 at once, then 1 every 0.6 s."""
    h = make("token_bucket")
    rate = Rate.parse("100/minute", burst=20)
    decisions = await h.many("k", rate, 21)
    assert sum(d.allowed for d in decisions) == 20
    assert decisions[-1].retry_after == 0.6
    for _ in range(3):
        h.clock.advance(0.6)
        assert (await h.hit("k", rate)).allowed
        assert not (await h.hit("k", rate)).allowed


async def test_fixed_window_allows_twice_the_limit_across_a_boundary(make: Any) -> None:
    """100/minute: 100 at 12:00:59 and 100 at 12:01:00 all pass; the 101st of a minute does not."""
    h = make("fixed_window", start=MINUTE_START + 59)
    rate = Rate.parse("100/minute")
    assert (await h.denied_after("k", rate, 100)).retry_after == pytest.approx(1.0)
    h.clock.advance(1.0)
    await h.denied_after("k", rate, 100)


async def test_sliding_window_cloudflare_example(make: Any) -> None:
    """50/minute, 42 last minute, 15 s in: 18 more pass (estimate 49.5), the next is denied."""
    h = make("sliding_window")
    rate = Rate.parse("50/minute")
    assert await h.all_allowed("k", rate, 42)
    h.clock.advance(60 + 15)
    await h.denied_after("k", rate, 18)


async def test_sliding_log_never_exceeds_the_limit_in_any_trailing_window(make: Any) -> None:
    """100/minute: the 101st inside 60 s is denied until the oldest request is 60 s old."""
    h = make("sliding_log")
    rate = Rate.parse("100/minute")
    assert await h.all_allowed("k", rate, 50)
    h.clock.advance(30)
    assert (await h.denied_after("k", rate, 50)).retry_after == pytest.approx(30.0)
    h.clock.advance(30)
    assert sum(d.allowed for d in await h.many("k", rate, 60)) == 50


@pytest.mark.parametrize(
    "algorithm",
    ["gcra", "token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log"],
)
async def test_layers_are_all_or_nothing(make: Any, algorithm: str) -> None:
    """A layer that denies keeps the others untouched, on every store and algorithm."""
    h = make(algorithm)
    tight, loose = Rate.parse("3/minute"), Rate.parse("100/hour")
    for _ in range(3):
        assert (await h.hit("k", [tight, loose])).allowed
    for _ in range(4):
        assert not (await h.hit("k", [tight, loose])).allowed
    assert (await h.peek("k", loose)).remaining == 97


async def test_concurrency_slots_come_back_after_release_or_ttl(make: Any) -> None:
    """Two slots: a third waits; a release frees one; a crashed holder's slot returns by TTL."""
    h = make("gcra")
    first = await h.acquire_slot("gpu", 2, ttl=10)
    second = await h.acquire_slot("gpu", 2, ttl=10)
    assert first.allowed and second.allowed
    assert not (await h.acquire_slot("gpu", 2, ttl=10)).allowed
    assert await h.release_slot(first)
    assert (await h.acquire_slot("gpu", 2, ttl=10)).allowed
    h.clock.advance(10)
    assert (await h.acquire_slot("gpu", 2, ttl=10)).allowed
