"""``acquire(timeout=...)`` under the leaky-bucket shaper: the shaped ``delay`` counts in the
timeout. A request the queue would hold past its deadline is not queued and not slept: acquire
gives up at once with a denial, as it does when a retry would pass the deadline.

Every store (memory, a real redis-server and a 3-primary Cluster, sync and async) on a
ManualClock, which the limiter's waits advance.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Decision, Limiter, MemoryStore, Rate
from ratewarden.testing import ManualClock
from tests._stores import STORES, Closers, close_all, make_store

#: 100/minute, burst 20: one emission interval is 0.6 s, a full queue drains in 12 s.
BUCKET = Rate.parse("100/minute", burst=20)
START = 1_699_999_980


async def _call(value: Any) -> Any:
    return await value if not isinstance(value, Decision) else value


@pytest.fixture(params=STORES)
async def shaper(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, ManualClock]]:
    """A leaky-bucket limiter of the parametrized store and flavour, and its clock."""
    closers: Closers = []
    clock = ManualClock(START)
    store = make_store(request, request.param, clock, closers)
    flavour = request.param.split("-")[1]
    kind = Limiter if flavour == "sync" else AsyncLimiter
    yield kind(store, algorithm="leaky_bucket"), clock
    await close_all(closers)


async def test_a_full_queue_is_refused_at_once_and_not_joined(shaper: Any) -> None:
    """After a burst of 20 the queue needs 12 s to drain: acquire(timeout=2) returns a denial
    with retry_after 12.0 at once (the clock does not move), and the queue is as it was."""
    limiter, clock = shaper
    for _ in range(20):
        await _call(limiter.hit("k", BUCKET))
    before = clock.now()
    decision = await _call(limiter.acquire("k", BUCKET, timeout=2.0))
    assert not decision.allowed
    assert (decision.retry_after, decision.delay, decision.remaining) == (12.0, 0.0, 0)
    assert clock.now() == before
    assert (await _call(limiter.peek("k", BUCKET))).delay == 12.0


async def test_a_delay_within_the_timeout_is_waited_and_one_past_it_is_refused(
    shaper: Any,
) -> None:
    """Five queued (3 s ahead): timeout=3.0 admits and waits exactly 3 s. With three more queued
    behind it (2.4 s in all), timeout=2.3 is refused without waiting, and queues nothing."""
    limiter, clock = shaper
    for _ in range(5):
        await _call(limiter.hit("k", BUCKET))
    before = clock.now()
    admitted = await _call(limiter.acquire("k", BUCKET, timeout=3.0))
    assert admitted.allowed and admitted.delay == 3.0
    assert clock.now() - before == pytest.approx(3.0)
    for _ in range(3):
        await _call(limiter.hit("k", BUCKET))
    refused = await _call(limiter.acquire("k", BUCKET, timeout=2.3))
    assert not refused.allowed and refused.retry_after == 2.4
    assert clock.now() - before == pytest.approx(3.0)
    assert (await _call(limiter.peek("k", BUCKET))).delay == 2.4


async def test_timeout_zero_admits_only_what_leaves_at_once(shaper: Any) -> None:
    """timeout=0 admits into an empty queue (delay 0) and refuses the next (delay 0.6)."""
    limiter, _ = shaper
    assert (await _call(limiter.acquire("k", BUCKET, timeout=0))).allowed
    refused = await _call(limiter.acquire("k", BUCKET, timeout=0))
    assert not refused.allowed and refused.retry_after == 0.6


async def test_without_a_timeout_the_whole_delay_is_waited(shaper: Any) -> None:
    """timeout=None keeps its meaning: wait as long as it takes, the queue's 12 s and the retry."""
    limiter, clock = shaper
    for _ in range(20):
        await _call(limiter.hit("k", BUCKET))
    before = clock.now()
    assert (await _call(limiter.acquire("k", BUCKET))).allowed
    assert clock.now() - before == pytest.approx(12.0)


async def test_layers_deny_the_layer_whose_queue_is_too_long(shaper: Any) -> None:
    """Over [10/second, 100/minute burst 20], a 20-deep minute queue binds: the denial is that
    layer's (retry_after 12.0) and the second layer shows it refused, the first not."""
    limiter, clock = shaper
    rates = [Rate.parse("10/second"), BUCKET]
    for _ in range(20):
        await _call(limiter.hit("k", BUCKET))
    decision = await _call(limiter.acquire("k", rates, timeout=1.0))
    assert not decision.allowed
    assert (decision.retry_after, decision.limit) == (12.0, 100)
    assert [layer.allowed for layer in decision.layers] == [True, False]
    assert clock.now() == START


class _Crowded(MemoryStore):
    """A memory store where another caller queues between acquire's peek and its hit."""

    def hit(self, algorithm: str, key: str, rates: Any, cost: int = 1) -> Decision:
        if cost > 0:
            super().hit(algorithm, key, rates, 5)  # the other caller: 3 s of work, ahead of us
        return super().hit(algorithm, key, rates, cost)


def test_a_place_lost_to_a_race_is_refused_not_slept() -> None:
    """Another caller queues 3 s of work after the peek found the queue empty: the admission's
    delay (3 s) passes timeout=1, so acquire returns a denial without waiting."""
    clock = ManualClock(START)
    limiter = Limiter(_Crowded(clock=clock), algorithm="leaky_bucket")
    decision = limiter.acquire("k", BUCKET, timeout=1.0)
    assert not decision.allowed and decision.retry_after == 3.0
    assert clock.now() == START
