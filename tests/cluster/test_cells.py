"""Cells on the 3-primary Cluster: placement, exact shares, the one retry, fragmentation."""

from __future__ import annotations

import math
import random
import re

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    CellLimiter,
    cell_keys,
    key_slot,
    split_rate,
    store_slot,
)
from ratewarden.storage._keys import escape
from ratewarden.storage._plan import build
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster
from tests.cluster._nodes import evalsha_calls, keyslot, reset_stats, slot_owner

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


def fragmentation_bound(capacity: int, cells: int, cost: int = 1) -> int:
    """Room a key may still have when a request is denied: N - 2 untried cells full, and the two
    tried cells each short of ``cost`` by at most ``cost - 1``."""
    return (cells - 2) * math.ceil(capacity / cells) + 2 * (cost - 1)


@pytest.mark.parametrize("key", ["tenant:big", "a{b}c%d", "é" * 40])
def test_three_cells_land_on_three_primaries(redis_cluster: RedisCluster, key: str) -> None:
    """CLUSTER KEYSLOT of each cell's real state key equals key_slot, and CLUSTER SLOTS puts the
    three slots on three different primaries."""
    rate = Rate.parse("300/second")
    owners = set()
    for cell in cell_keys(key, 3):
        state_key = build("gcra", "rw", cell, rate, 1).keys[0]
        slot = keyslot(redis_cluster, state_key)
        assert slot == key_slot(state_key) == store_slot(cell) == key_slot(escape(cell))
        owners.add(slot_owner(redis_cluster, slot))
    assert len(owners) == 3


NAMES = st.text(alphabet=st.sampled_from("ab{}%é~:x"), max_size=12) | st.text(max_size=8)


@settings(max_examples=300, deadline=None)
@given(name=NAMES)
def test_key_slot_is_cluster_keyslot_for_every_name(redis_cluster: RedisCluster, name: str) -> None:
    """key_slot(name) equals CLUSTER KEYSLOT name: braces make a hash tag as Redis reads them."""
    assert key_slot(name) == keyslot(redis_cluster, name)


@settings(max_examples=100, deadline=None)
@given(key=NAMES.filter(bool))
def test_store_slot_is_where_the_store_puts_a_key(redis_cluster: RedisCluster, key: str) -> None:
    """store_slot(key) equals CLUSTER KEYSLOT of the store's state key for ``key``."""
    state_key = build("gcra", "rw", key, Rate.parse("3/second"), 1).keys[0]
    assert store_slot(key) == keyslot(redis_cluster, state_key)


def test_a_cell_name_with_braces_has_its_store_slot_not_its_own() -> None:
    """A cell of a key holding braces: the name's own slot follows its hash tag, its state's
    slot the escaped whole name, and the placement is by the latter."""
    cell = cell_keys("a{b}c", 3)[0]
    assert key_slot(cell) == key_slot("b")
    assert store_slot(cell) == key_slot(escape(cell))
    assert 0 <= store_slot(cell) < 16384 // 3


def test_six_cells_put_two_on_each_primary(redis_cluster: RedisCluster) -> None:
    """With N a multiple of the primaries, each primary holds N / 3 cells."""
    owners = [slot_owner(redis_cluster, key_slot(escape(c))) for c in cell_keys("t", 6)]
    assert sorted(owners.count(port) for port in set(owners)) == [2, 2, 2]


def test_explicit_bands_place_cells_where_told() -> None:
    """``bands`` (say, from CLUSTER SHARDS) put cell i in the middle of bands[i % len]."""
    bands = [(0, 100), (8000, 8100)]
    slots = [key_slot(escape(c)) for c in cell_keys("k", 4, bands)]
    assert [8000 <= s < 8100 for s in slots] == [False, True, False, True]
    assert all(s < 100 or 8000 <= s < 8100 for s in slots)


@given(
    limit=st.integers(min_value=1, max_value=10_000),
    burst=st.one_of(st.none(), st.integers(min_value=1, max_value=10_000)),
    cells=st.integers(min_value=2, max_value=64),
)
def test_shares_add_up_to_the_rate_exactly(limit: int, burst: int | None, cells: int) -> None:
    """Limits and capacities of the cells sum to the key's: no unit is created by rounding."""
    rate = Rate(limit, 1, burst)
    if cells > min(limit, rate.capacity):
        with pytest.raises(ConfigurationError, match="at most"):
            split_rate(rate, cells)
        return
    shares = split_rate(rate, cells)
    assert sum(s.limit for s in shares) == limit
    assert sum(s.capacity for s in shares) == rate.capacity
    assert max(s.capacity for s in shares) - min(s.capacity for s in shares) <= 1
    assert all(s.period_us == rate.period_us for s in shares)


def test_a_denied_cell_retries_the_next_one_before_denying(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """Picker stuck on cell 0: cell 0's share, then cell 1's via the retry, then denial while
    cell 2 still has its whole share (the fragmentation the bound describes). A denial costs
    two EVALSHA on two primaries."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    cells = CellLimiter(store, 3, picker=lambda n: 0)
    rate = Rate.parse("30/minute")
    reset_stats(redis_cluster)
    outcomes = [cells.hit("k", rate).allowed for _ in range(21)]
    assert outcomes == [True] * 20 + [False]
    # cell 0: 10 allowed + 11 denied first tries; cell 1: 10 allowed + the last retry
    assert sorted(evalsha_calls(redis_cluster).values()) == [0, 10 + 1, 10 + 11]
    remaining = store.hit("gcra", cells.keys("k")[2], cells.shares(rate)[2], 0).remaining
    assert remaining == 10 <= fragmentation_bound(30, 3)


@pytest.mark.parametrize("cells", [3, 4, 8])
def test_fragmentation_stays_within_its_bound(
    cluster_client: redis.RedisCluster, cells: int
) -> None:
    """Frozen time, random picker, 20 seeds: when the first request is denied, the key's unused
    room never passes (N - 2) * ceil(C / N); never more than C is admitted."""
    capacity = 48
    rate = Rate(capacity, 60)
    worst = 0
    for seed in range(20):
        cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
        rng = random.Random(seed)
        store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
        limiter = CellLimiter(store, cells, picker=rng.randrange)
        admitted = 0
        while limiter.hit("k", rate).allowed:
            admitted += 1
        worst = max(worst, capacity - admitted)
        assert admitted + sum(limiter.hit("k", rate).allowed for _ in range(capacity)) <= capacity
    print(
        f"\ncells={cells}: worst room left at the first denial {worst} of {capacity} "
        f"(bound {fragmentation_bound(capacity, cells)})"
    )
    assert worst <= fragmentation_bound(capacity, cells)


@pytest.mark.parametrize(("cells", "capacity"), [(3, 47), (4, 50), (8, 48)])
def test_round_robin_in_one_process_denies_only_when_every_unit_is_spent(
    cluster_client: redis.RedisCluster, cells: int, capacity: int
) -> None:
    """Taken in turn, the cells drain together (the larger shares come first, and the retry
    reaches them): in frozen time the first denial comes after exactly C admissions."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    limiter = CellLimiter(store, cells)
    admitted = 0
    while limiter.hit("rr", Rate(capacity, 60)).allowed:
        admitted += 1
    assert admitted == capacity


def test_a_picker_out_of_range_is_refused_before_anything_is_consumed(
    cluster_client: redis.RedisCluster,
) -> None:
    """A picker returning 3 of 3 cells raises ConfigurationError; no cell was charged."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    with pytest.raises(ConfigurationError, match="range"):
        CellLimiter(store, 3, picker=lambda n: n).hit("k", Rate(30, 60))
    fresh = CellLimiter(store, 3)
    assert [fresh.hit("k", Rate(30, 60), 0).remaining for _ in range(3)] == [10, 10, 10]


@pytest.mark.parametrize("cells", [0, 1, 257, True, 2.5])
def test_bad_cell_counts_are_refused(cluster_client: redis.RedisCluster, cells: object) -> None:
    """Cells outside 2..256 (or not whole numbers) raise ConfigurationError."""
    store = RedisStore(cluster_client, timeout=1.0)
    with pytest.raises(ConfigurationError, match="cells"):
        CellLimiter(store, cells)  # type: ignore[arg-type]


def test_more_cells_than_the_limit_is_refused_at_the_first_hit(
    cluster_client: redis.RedisCluster,
) -> None:
    """A 2/minute rate cannot give 3 cells a unit each: ConfigurationError says how many fit."""
    store = RedisStore(cluster_client, timeout=1.0)
    with pytest.raises(ConfigurationError, match="at most 2 cells"):
        CellLimiter(store, 3).hit("k", Rate(2, 60))


def test_a_double_denial_is_answered_locally_until_a_cell_can_have_a_unit(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """After both tried cells deny, requests before the sooner retry time make no store call;
    the first one after it asks the store again (and is allowed: a unit has come back)."""
    clock = ManualClock()
    store = RedisStore(cluster_client, clock=clock, timeout=1.0)
    cells = CellLimiter(store, 3, picker=lambda n: 0)
    rate = Rate(30, 60)  # each cell: 10 per minute, a unit every 6 s
    for _ in range(20):
        assert cells.hit("k", rate).allowed
    denied = cells.hit("k", rate)
    assert not denied.allowed and denied.retry_after == 6.0
    reset_stats(redis_cluster)
    clock.advance(5.0)
    again = cells.hit("k", rate)
    assert not again.allowed and again.retry_after == 1.0
    assert sum(evalsha_calls(redis_cluster).values()) == 0
    clock.advance(1.0)
    assert cells.hit("k", rate).allowed
    assert sum(evalsha_calls(redis_cluster).values()) == 1


def test_a_remembered_double_denial_is_aged_on_every_layer(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """With two rates, the in-process answer to a double denial 2 s later has every layer's
    times 2 s shorter (the limiter's aging), not only the binding layer's; no store call."""
    clock = ManualClock()
    store = RedisStore(cluster_client, clock=clock, timeout=1.0)
    cells = CellLimiter(store, 3, picker=lambda n: 0)
    rates = [Rate(30, 60), Rate(300, 3600)]  # each cell: 10 per minute and 100 per hour
    denied = cells.hit("k", rates)
    while denied.allowed:
        denied = cells.hit("k", rates)
    reset_stats(redis_cluster)
    clock.advance(2.0)
    again = cells.hit("k", rates)
    assert sum(evalsha_calls(redis_cluster).values()) == 0
    assert not again.allowed and again.retry_after == pytest.approx(denied.retry_after - 2.0)
    assert len(again.layers) == len(denied.layers) == 2
    for old, new in zip(denied.layers, again.layers, strict=True):
        assert new.reset_after == pytest.approx(max(0.0, old.reset_after - 2.0))
        assert new.retry_after == pytest.approx(max(0.0, old.retry_after - 2.0))
    assert denied.layers[1].reset_after > 2.0  # the hourly layer was not binding, and aged too


def test_without_the_negative_cache_every_denial_costs_two_commands(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """``negative_cache=None``: ten denials in frozen time are twenty EVALSHA."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    cells = CellLimiter(store, 3, negative_cache=None)
    rate = Rate(3, 60)
    assert sum(cells.hit("k", rate).allowed for _ in range(3)) == 3
    reset_stats(redis_cluster)
    assert not any(cells.hit("k", rate).allowed for _ in range(10))
    assert sum(evalsha_calls(redis_cluster).values()) == 20


def test_a_one_slot_band_is_found_too() -> None:
    """A band of a single slot still gets its cell (a search of about 16,384 salts)."""
    (first, second) = cell_keys("k", 2, [(100, 101), (16383, 16384)])
    assert key_slot(escape(first)) == 100
    assert key_slot(escape(second)) == 16383


@pytest.mark.parametrize("bands", [[], [(5, 5)], [(-1, 10)], [(0, 16385)], [(1, 2, 3)], ["ab"]])
def test_bad_bands_are_refused(bands: list[object]) -> None:
    """Empty, reversed, out-of-range or malformed bands raise ConfigurationError."""
    with pytest.raises(ConfigurationError, match="band"):
        cell_keys("k", 3, bands)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bands", "named"),
    [
        ([(0, 100), (50, 150)], "(0, 100) and (50, 150) overlap"),
        ([(0, 100), (0, 100)], "(0, 100) and (0, 100) overlap"),
        ([(100, 200), (0, 16384)], "(100, 200) and (0, 16384) overlap"),
        ([(8000, 8100), (0, 100)], "(0, 100) comes after (8000, 8100)"),
        ([(0, 100), (100, 200), (150, 300)], "(100, 200) and (150, 300) overlap"),
        ([(0, 100), (200, 100)], "(200, 100) must be (start, end)"),
    ],
)
def test_overlapping_or_unsorted_bands_are_refused_naming_them(
    bands: list[tuple[int, int]], named: str
) -> None:
    """Bands that share slots would put two cells on one primary, and bands out of slot order
    are not what read_slot_map gives: CellLimiter, its asyncio twin and cell_keys refuse
    them, naming the parameter and the offending bands."""
    with pytest.raises(ConfigurationError, match=re.escape(f"bands: {named}")):
        CellLimiter(MemoryStore(), 3, bands=bands)
    with pytest.raises(ConfigurationError, match=re.escape(f"bands: {named}")):
        AsyncCellLimiter(AsyncMemoryStore(), 3, bands=bands)
    with pytest.raises(ConfigurationError, match=re.escape(f"bands: {named}")):
        cell_keys("k", 3, bands)


@pytest.mark.parametrize("bands", ["0-100", 7, {(0, 100): 1}])
def test_bands_that_are_not_a_list_of_ranges_are_refused_naming_the_parameter(
    bands: object,
) -> None:
    """A string, a number or a mapping for bands is refused as such, not taken apart."""
    with pytest.raises(ConfigurationError, match=r"^bands .* must be a list of \(start, end\)"):
        CellLimiter(MemoryStore(), 3, bands=bands)  # type: ignore[arg-type]


def test_adjacent_bands_in_slot_order_are_taken() -> None:
    """Bands that touch (one's end is the next's start) share no slot: accepted as given."""
    cells = CellLimiter(MemoryStore(), 3, bands=[(0, 100), (100, 200), (200, 16384)])
    assert cells.bands == [(0, 100), (100, 200), (200, 16384)]
