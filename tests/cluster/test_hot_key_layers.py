"""A detected hot key with layered rates (``[10/second, 100/minute]``) carries each layer's own
usage when it moves onto cells and back: no move hands the wider layer a fresh allowance.

Before, the usage was one number (the fullest layer's), charged to every layer and clipped by the
tightest: a key moving after 58 of its 100 minute units left the cells' minute layers 10 used,
and 147 were admitted in one fixed 100/minute window (148 moving back). Here the same traffic,
in ManualClock time from a whole minute, on a MemoryStore (blocking and asyncio) and on the real
3-primary Cluster (blocking and asyncio): never more than the limit in the window, and never
more than a plain Limiter admits under the same requests.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import AsyncLimiter, Limiter, MemoryStore, Rate
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock

#: A whole minute (divisible by 60): the fixed 100/minute window is the test's 60 seconds.
MINUTE = 1_699_999_980
SECOND, PER_MINUTE = Rate.parse("10/second"), Rate.parse("100/minute")
LAYERED = {"second-first": (SECOND, PER_MINUTE), "minute-first": (PER_MINUTE, SECOND)}
#: Requests per second: quiet (8/s), then hot (40/s, over the detector's 25) — or the reverse.
TRAFFIC = {"in": [8] * 6 + [40] * 54, "back": [40] * 5 + [8] * 55}


async def answer(found: Any) -> Any:
    """``found``, awaited when it is the asyncio twin's coroutine."""
    return await found if inspect.isawaitable(found) else found


async def minute_of(hot: Any, plain: Any, clock: ManualClock, rates: Any, traffic: str) -> tuple:
    """Drive one minute of ``TRAFFIC[traffic]`` through the hot-key limiter and a plain limiter
    (another key on the same store); (admitted by each, whether the key was ever hot, and
    whether it was hot at the end)."""
    hot_admitted = plain_admitted = 0
    was_hot = False
    for per_second in TRAFFIC[traffic]:
        for _ in range(per_second):
            hot_admitted += (await answer(hot.hit("tenant:big", rates))).allowed
            plain_admitted += (await answer(plain.hit("tenant:plain", rates))).allowed
            was_hot = was_hot or hot.is_hot("tenant:big")
            clock.advance(0.999 / per_second)
        clock.advance(0.001)
    return hot_admitted, plain_admitted, was_hot, hot.is_hot("tenant:big")


def limiters(store: Any, clock: ManualClock, algorithm: str, asyncio: bool) -> tuple[Any, Any]:
    """A HotKeyLimiter (detector at 25/s, 3 cells) and a plain Limiter over ``store``."""
    detector = HotKeyDetector(25, clock=clock)
    if asyncio:
        cells: Any = AsyncCellLimiter(store, 3, algorithm)
        hot: Any = AsyncHotKeyLimiter(store, cells, algorithm, detector=detector, clock=clock)
        return hot, AsyncLimiter(store, algorithm)
    cells = CellLimiter(store, 3, algorithm)
    return HotKeyLimiter(store, cells, algorithm, detector=detector, clock=clock), Limiter(
        store, algorithm
    )


def check(found: tuple, traffic: str, algorithm: str) -> None:
    hot, plain, was_hot, hot_at_end = found
    # The move happened in the minute (in: turned hot; back: hot, then cooled).
    assert was_hot and hot_at_end == (traffic == "in")
    assert hot <= plain, f"{hot} admitted, a plain Limiter {plain}"
    if algorithm == "fixed_window":
        assert plain == 100
        assert 90 <= hot <= 100  # the carry rounds up: it may deny a few, never admit more


@pytest.mark.parametrize("algorithm", ["fixed_window", "gcra"])
@pytest.mark.parametrize("traffic", sorted(TRAFFIC))
@pytest.mark.parametrize("order", sorted(LAYERED))
@pytest.mark.parametrize("asyncio", [False, True], ids=["blocking", "asyncio"])
async def test_a_layered_key_moving_on_memory_admits_no_more_than_its_limit(
    asyncio: bool, order: str, traffic: str, algorithm: str
) -> None:
    """MemoryStore: moving in after 58 units (or back after 5 hot seconds) with
    ``[10/second, 100/minute]`` in either order admits at most what a plain Limiter does
    (100 in the fixed minute; 199 for gcra's burst and rate); before, 147-148 and 240."""
    clock = ManualClock(MINUTE)
    store = AsyncMemoryStore(clock=clock) if asyncio else MemoryStore(clock=clock)
    hot, plain = limiters(store, clock, algorithm, asyncio)
    check(await minute_of(hot, plain, clock, LAYERED[order], traffic), traffic, algorithm)


def test_cells_show_each_layers_own_usage_after_the_move() -> None:
    """30 units over 6 quiet seconds (5 a second), then a burst that turns the key hot: the
    cells' minute layers show the key's minute usage (rounded up, at most 1 more per cell),
    their second layers this second's; before, both showed the second layer's few."""
    clock = ManualClock(MINUTE)
    store = MemoryStore(clock=clock)
    cells = CellLimiter(store, 3, "fixed_window")
    hot = HotKeyLimiter(
        store, cells, "fixed_window", detector=HotKeyDetector(25, clock=clock), clock=clock
    )
    rates = (SECOND, PER_MINUTE)
    for _ in range(6):
        for _ in range(5):
            assert hot.hit("k", rates).allowed
            clock.advance(0.19)
        clock.advance(0.05)
    while True:
        own = hot.limiter.peek("k", rates)
        hot.hit("k", rates)
        if hot.is_hot("k"):
            break
    used = [rate.capacity - layer.remaining for rate, layer in zip(rates, own.layers, strict=True)]
    assert used[1] >= 30
    # What the key had used when it moved (rounded up per cell), plus the request that moved
    # it if a cell admitted it.
    second, minute = cells.usage("k", rates)
    assert used[1] <= minute <= used[1] + 3
    assert used[0] <= second <= SECOND.capacity


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("traffic", sorted(TRAFFIC))
async def test_a_layered_key_moving_on_the_cluster_admits_no_more_than_its_limit(
    cluster_client: redis.RedisCluster, traffic: str
) -> None:
    """The real 3-primary Cluster, fixed_window, ``[10/second, 100/minute]``: at most 100 in
    the fixed minute moving in and moving back (before, 147 and 148)."""
    clock = ManualClock(MINUTE)
    store = RedisStore(cluster_client, clock=clock, timeout=1.0)
    hot, plain = limiters(store, clock, "fixed_window", False)
    found = await minute_of(hot, plain, clock, LAYERED["second-first"], traffic)
    check(found, traffic, "fixed_window")


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("traffic", sorted(TRAFFIC))
async def test_a_layered_key_moving_on_the_cluster_asyncio(
    async_client: aredis.RedisCluster, traffic: str
) -> None:
    """The asyncio twin on the real Cluster: the same bound."""
    clock = ManualClock(MINUTE)
    store = AsyncRedisStore(async_client, clock=clock, timeout=1.0)
    hot, plain = limiters(store, clock, "fixed_window", True)
    check(
        await minute_of(hot, plain, clock, LAYERED["minute-first"], traffic),
        traffic,
        "fixed_window",
    )
    await store.aclose()
