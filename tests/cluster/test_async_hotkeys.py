"""The asyncio twins on the 3-primary Cluster: the same decisions as the blocking classes."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier
from tests._servers import RedisCluster
from tests.cluster._nodes import evalsha_calls, reset_stats

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

RATE = Rate(90, 60, burst=12)


async def test_async_cells_decide_exactly_as_the_blocking_cells(
    async_client: aredis.RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """The same 400 requests (1 ms apart, a random-looking cost pattern) on a blocking and an
    asyncio CellLimiter, on different keys: identical allowed/denied sequences and remainders."""
    sync_clock, async_clock = ManualClock(), ManualClock()
    blocking = CellLimiter(RedisStore(cluster_client, clock=sync_clock, timeout=1.0), 3)
    store = AsyncRedisStore(async_client, clock=async_clock, timeout=1.0)
    asyncio_cells = AsyncCellLimiter(store, 3)
    seen_sync, seen_async = [], []
    for n in range(400):
        cost = 1 + (n * 7) % 3
        a = blocking.hit("twin:sync", RATE, cost)
        b = await asyncio_cells.hit("twin:async", RATE, cost)
        seen_sync.append((a.allowed, a.remaining, a.retry_after))
        seen_async.append((b.allowed, b.remaining, b.retry_after))
        sync_clock.advance(0.001)
        async_clock.advance(0.001)
    assert seen_sync == seen_async
    assert 0 < sum(allowed for allowed, _, _ in seen_sync) < 400
    await store.aclose()


async def test_async_detected_key_moves_to_cells_on_three_primaries(
    redis_cluster: RedisCluster, async_client: aredis.RedisCluster
) -> None:
    """As the blocking test: detected after 20 of 60 units, at most 60 in all, on 3 primaries."""
    clock = ManualClock()
    store = AsyncRedisStore(async_client, clock=clock, timeout=1.0)
    detector = HotKeyDetector(20, interval=1.0, clock=clock)
    limiter = AsyncHotKeyLimiter(store, AsyncCellLimiter(store, 3), detector=detector)
    rate = Rate(60, 60)
    reset_stats(redis_cluster)
    allowed = sum([(await limiter.hit("tenant:hot", rate)).allowed for _ in range(200)])
    assert limiter.is_hot("tenant:hot")
    assert 60 - (1 * 20 + 3) <= allowed <= 60
    assert len([c for c in evalsha_calls(redis_cluster).values() if c > 0]) == 3
    await store.aclose()


async def test_async_leases_for_configured_hot_keys(async_client: aredis.RedisCluster) -> None:
    """An AsyncTwoTier with leases of 10: 25 requests, 3 store calls."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=1.0)
    tier = AsyncTwoTier(store, lease=10)
    limiter = AsyncHotKeyLimiter(store, tier, hot_keys=["tenant:hot"])
    for _ in range(25):
        assert (await limiter.hit("tenant:hot", Rate(1000, 60))).allowed
    assert tier.counts.as_dict()["store_calls"] == 3
    await store.aclose()


async def test_a_blocking_mitigation_is_refused_by_the_async_limiter(
    async_client: aredis.RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """A blocking CellLimiter in an AsyncHotKeyLimiter raises ConfigurationError."""
    store = AsyncRedisStore(async_client, timeout=1.0)
    blocking = CellLimiter(RedisStore(cluster_client, timeout=1.0), 3)
    with pytest.raises(ConfigurationError, match="AsyncCellLimiter"):
        AsyncHotKeyLimiter(store, blocking)  # type: ignore[arg-type]
    await store.aclose()
