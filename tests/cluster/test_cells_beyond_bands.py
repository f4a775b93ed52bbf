"""More cells than bands on the 3-primary Cluster: the bands are taken in turn (6 cells on 3
primaries, two on each; 3 cells on 2 bands, cells 0 and 2 on the first), for both twins."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import AsyncCellLimiter, CellLimiter, aread_slot_map, read_slot_map
from ratewarden.storage._plan import build
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster
from tests.cluster._nodes import evalsha_calls, keyslot, reset_stats, slot_owner

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

RATE = Rate.parse("600/second")
#: Two bands that are not the Cluster's own thirds: the first holds slots of two primaries.
TWO_BANDS = [(0, 8000), (8000, 16384)]


def state_slots(cluster: RedisCluster, cells: Sequence[str]) -> list[int]:
    """CLUSTER KEYSLOT of each cell's real state key: where Redis keeps it."""
    return [keyslot(cluster, build("gcra", "rw", cell, RATE, 1).keys[0]) for cell in cells]


def in_middle_half(slot: int, band: tuple[int, int]) -> bool:
    start, end = band
    width = end - start
    return start + width // 4 <= slot < end - width // 4


def test_six_cells_on_three_live_bands_sit_two_on_each_primary(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """CellLimiter(store, cells=6, bands=read_slot_map(...).bands): cell i's state key is in the
    middle half of band i % 3 (CLUSTER KEYSLOT), so each primary (CLUSTER SLOTS) keeps two
    cells, and six round-robin hits run two EVALSHA on each primary, all admitted."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    bands = read_slot_map(store.client).bands
    assert len(bands) == 3
    cells = CellLimiter(store, cells=6, bands=bands)
    keys = cells.keys("tenant:big")
    slots = state_slots(redis_cluster, keys)
    assert all(in_middle_half(slot, bands[i % 3]) for i, slot in enumerate(slots))
    owners = [slot_owner(redis_cluster, slot) for slot in slots]
    assert owners[:3] == owners[3:] and len(set(owners)) == 3
    reset_stats(redis_cluster)
    decisions = [cells.hit("tenant:big", RATE) for _ in range(6)]
    assert all(d.allowed and d.limit == 100 for d in decisions)
    assert sorted(evalsha_calls(redis_cluster).values()) == [2, 2, 2]


def test_three_cells_on_two_bands_put_cells_zero_and_two_on_the_first(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """bands=[(0, 8000), (8000, 16384)] with 3 cells: cells 0 and 2 in the first band's middle,
    cell 1 in the second's, by CLUSTER KEYSLOT; the limiter decides on them (3 of 3 admitted).
    Taking bands in turn is no licence for unsorted ones: those are still refused."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    cells = CellLimiter(store, cells=3, bands=TWO_BANDS)
    assert cells.bands == TWO_BANDS
    slots = state_slots(redis_cluster, cells.keys("x"))
    assert [in_middle_half(slot, TWO_BANDS[i % 2]) for i, slot in enumerate(slots)] == [True] * 3
    assert all(cells.hit("x", Rate.parse("3/minute")).allowed for _ in range(3))
    assert not cells.hit("x", Rate.parse("3/minute")).allowed
    with pytest.raises(ConfigurationError, match=r"bands: \(0, 100\) comes after \(200, 300\)"):
        CellLimiter(store, cells=6, bands=[(200, 300), (0, 100)])


async def test_async_six_cells_on_three_live_bands_sit_two_on_each_primary(
    redis_cluster: RedisCluster, async_client: aredis.RedisCluster
) -> None:
    """The asyncio twin on aread_slot_map's bands: the same cells as the blocking limiter, two
    on each primary, and six hits run two EVALSHA on each."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=1.0)
    try:
        bands = (await aread_slot_map(store.client)).bands
        cells = AsyncCellLimiter(store, cells=6, bands=bands)
        keys = cells.keys("tenant:big")
        assert keys == CellLimiter(MemoryStore(), cells=6, bands=bands).keys("tenant:big")
        slots = state_slots(redis_cluster, keys)
        assert all(in_middle_half(slot, bands[i % 3]) for i, slot in enumerate(slots))
        assert (
            sorted(Counter(slot_owner(redis_cluster, slot) for slot in slots).values()) == [2] * 3
        )
        reset_stats(redis_cluster)
        decisions = [await cells.hit("tenant:big", RATE) for _ in range(6)]
        assert all(d.allowed and d.limit == 100 for d in decisions)
        assert sorted(evalsha_calls(redis_cluster).values()) == [2, 2, 2]
    finally:
        await store.aclose()


async def test_async_three_cells_on_two_bands(
    redis_cluster: RedisCluster, async_client: aredis.RedisCluster
) -> None:
    """AsyncCellLimiter with 3 cells on 2 bands: placed as the blocking twin places them."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=1.0)
    try:
        cells = AsyncCellLimiter(store, cells=3, bands=TWO_BANDS)
        slots = state_slots(redis_cluster, cells.keys("x"))
        assert [in_middle_half(slot, TWO_BANDS[i % 2]) for i, slot in enumerate(slots)] == [
            True
        ] * 3
        assert all([(await cells.hit("x", Rate.parse("3/minute"))).allowed for _ in range(3)])
    finally:
        await store.aclose()
