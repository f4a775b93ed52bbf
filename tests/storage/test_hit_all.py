"""hit_all: several decisions of one algorithm, all or nothing, in one atomic step.

On the memory store, on standalone Redis and on a 3-primary Cluster (where
only keys of one slot can share a script), sync and asyncio; the Lua twin is
checked against the memory store on random batches.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from ratewarden import Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.errors import ConfigurationError
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT, RedisCluster
from tests.storage.conftest import Client, all_keys

TWO_PER_MINUTE = Rate.parse("2/minute")
FIVE_PER_MINUTE = Rate.parse("5/minute")
LAYERS = (Rate.parse("3/second"), Rate.parse("4/minute"))
#: A whole minute since the epoch: fixed windows start here.
MINUTE_START = 1_800_000_000


def _slot_keys(count: int) -> list[str]:
    """``count`` distinct keys that a Cluster puts in one slot."""
    target = key_slot(b"k0")
    keys = []
    for i in itertools.count():
        if key_slot(f"k{i}".encode()) == target:
            keys.append(f"k{i}")
            if len(keys) == count:
                return keys
    raise AssertionError("unreachable")


# -- the semantics, on the memory store


def test_every_call_allowed_consumes_every_cost() -> None:
    store = MemoryStore(clock=ManualClock())
    decisions = store.hit_all("fixed_window", [("a", TWO_PER_MINUTE, 1), ("b", FIVE_PER_MINUTE, 2)])
    assert [(d.allowed, d.remaining, d.cost) for d in decisions] == [(True, 1, 1), (True, 3, 2)]
    again = store.hit_all("fixed_window", [("a", TWO_PER_MINUTE, 1), ("b", FIVE_PER_MINUTE, 2)])
    assert [(d.allowed, d.remaining) for d in again] == [(True, 0), (True, 1)]


def test_one_denial_consumes_nothing_anywhere() -> None:
    """The denied call says why; the one that would pass is reported as a check (cost 0)."""
    store = MemoryStore(clock=ManualClock(MINUTE_START))
    store.hit("fixed_window", "a", TWO_PER_MINUTE, 2)  # "a" is full
    decisions = store.hit_all("fixed_window", [("b", FIVE_PER_MINUTE, 3), ("a", TWO_PER_MINUTE, 1)])
    b, a = decisions
    assert (b.allowed, b.remaining, b.cost) == (True, 5, 0)
    assert (a.allowed, a.remaining, a.cost) == (False, 0, 1)
    assert a.retry_after == 60.0
    # Nothing was taken from "b": five fit on their own.
    assert store.hit("fixed_window", "b", FIVE_PER_MINUTE, 5).allowed


def test_a_call_with_several_rates_is_layered_inside_the_batch() -> None:
    store = MemoryStore(clock=ManualClock())
    for _ in range(3):
        assert all(d.allowed for d in store.hit_all("gcra", [("x", LAYERS, 1), ("y", LAYERS, 1)]))
    # The per-second layer of "x" is empty now (burst 3): neither call consumes.
    decisions = store.hit_all("gcra", [("x", LAYERS, 1), ("z", FIVE_PER_MINUTE, 1)])
    assert [d.allowed for d in decisions] == [False, True]
    assert decisions[0].rate == LAYERS[0]
    assert decisions[1].cost == 0
    assert store.hit("gcra", "z", FIVE_PER_MINUTE, 5).allowed


def test_cost_zero_calls_check_without_consuming() -> None:
    store = MemoryStore(clock=ManualClock())
    decisions = store.hit_all("gcra", [("a", TWO_PER_MINUTE, 0), ("b", TWO_PER_MINUTE, 2)])
    assert [(d.allowed, d.remaining) for d in decisions] == [(True, 2), (True, 0)]
    assert store.hit("gcra", "a", TWO_PER_MINUTE, 2).allowed


def test_no_calls_decide_nothing() -> None:
    assert MemoryStore().hit_all("gcra", []) == []


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ("a", r"must be a list of \(key, rates, cost\)"),
        ([("a", TWO_PER_MINUTE)], "call 0"),
        ([["a", TWO_PER_MINUTE, 1]], "call 0"),
        ([("a", TWO_PER_MINUTE, 1), ("", TWO_PER_MINUTE, 1)], "key must not be empty"),
        ([("a", TWO_PER_MINUTE, -1)], "must not be negative"),
        ([("a", "2/minute", 1)], "must be a Rate"),
        ([("a", TWO_PER_MINUTE, 1), ("a", TWO_PER_MINUTE, 2)], "calls 0 and 1 both count"),
        ([("a", LAYERS, 1), ("a", (TWO_PER_MINUTE, LAYERS[1]), 2)], "calls 0 and 1 both count"),
    ],
)
def test_bad_calls_raise_and_change_nothing(calls: Any, message: str) -> None:
    store = MemoryStore(clock=ManualClock())
    with pytest.raises(ConfigurationError, match=message):
        store.hit_all("gcra", calls)
    assert len(store) == 0
    with pytest.raises(ConfigurationError, match="algorithm"):
        store.hit_all("nope", [("a", TWO_PER_MINUTE, 1)])


def test_the_same_key_on_different_rates_is_two_counters() -> None:
    store = MemoryStore(clock=ManualClock())
    decisions = store.hit_all("gcra", [("a", TWO_PER_MINUTE, 2), ("a", FIVE_PER_MINUTE, 5)])
    assert [d.remaining for d in decisions] == [0, 0]


async def test_the_async_memory_store_decides_the_same() -> None:
    store = AsyncMemoryStore(clock=ManualClock())
    await store.hit("fixed_window", "a", TWO_PER_MINUTE, 2)
    decisions = await store.hit_all(
        "fixed_window", [("a", TWO_PER_MINUTE, 1), ("b", TWO_PER_MINUTE, 1)]
    )
    assert [(d.allowed, d.cost) for d in decisions] == [(False, 1), (True, 0)]


# -- on Redis


@pytest.mark.redis
def test_redis_decides_a_batch_in_one_script(client: Client) -> None:
    clock = ManualClock(MINUTE_START)
    store = RedisStore(client, clock=clock, timeout=STORE_TIMEOUT)
    keys = _slot_keys(3)
    first, second, third = keys
    store.hit("fixed_window", first, TWO_PER_MINUTE, 2)
    calls = [(second, FIVE_PER_MINUTE, 3), (first, TWO_PER_MINUTE, 1), (third, LAYERS, 1)]
    denied = store.hit_all("fixed_window", calls)
    assert denied is not None
    assert [(d.allowed, d.cost) for d in denied] == [(True, 0), (False, 1), (True, 0)]
    assert denied[1].retry_after == 60.0
    clock.advance(60)
    admitted = store.hit_all("fixed_window", calls)
    assert admitted is not None
    assert [(d.allowed, d.remaining) for d in admitted] == [(True, 2), (True, 1), (True, 2)]


@pytest.mark.redis
def test_redis_keys_expire_after_a_batch(client: Client) -> None:
    store = RedisStore(client, timeout=STORE_TIMEOUT)
    keys = _slot_keys(2)
    assert store.hit_all("gcra", [(keys[0], TWO_PER_MINUTE, 1), (keys[1], LAYERS, 1)])
    found = all_keys(client)
    assert len(found) == 3
    for key in found:
        assert 0 < client.pttl(key) <= 60_000


@pytest.mark.cluster
def test_cluster_keys_in_different_slots_are_not_decided_together(
    cluster_client: redis.RedisCluster,
) -> None:
    """None says "decide these another way"; nothing was sent or written."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert key_slot(b"a") != key_slot(b"b")
    assert store.hit_all("gcra", [("a", TWO_PER_MINUTE, 1), ("b", TWO_PER_MINUTE, 1)]) is None
    assert all_keys(cluster_client) == []


@pytest.mark.redis
def test_standalone_redis_takes_keys_of_any_slot(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    decisions = store.hit_all("gcra", [("a", TWO_PER_MINUTE, 1), ("b", TWO_PER_MINUTE, 1)])
    assert decisions is not None
    assert [d.allowed for d in decisions] == [True, True]


@pytest.mark.redis
async def test_async_redis_decides_a_batch(redis_server: Any) -> None:
    client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
    await client.flushall()
    store = AsyncRedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    try:
        await store.hit("sliding_log", "a", TWO_PER_MINUTE, 2)
        calls = [("a", TWO_PER_MINUTE, 1), ("b", TWO_PER_MINUTE, 1)]
        together = await asyncio.gather(
            store.hit_all("sliding_log", calls), store.hit_all("sliding_log", calls[1:])
        )
        first, second = together
        assert first is not None and second is not None
        assert [(d.allowed, d.cost) for d in first] == [(False, 1), (True, 0)]
        assert [(d.allowed, d.remaining) for d in second] == [(True, 1)]
    finally:
        await store.aclose()
        await client.aclose()


@pytest.mark.cluster
async def test_async_cluster_routes_a_one_slot_batch(redis_cluster: RedisCluster) -> None:
    client = aredis.RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
    await client.flushall(target_nodes=aredis.RedisCluster.PRIMARIES)
    store = AsyncRedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    try:
        keys = _slot_keys(2)
        found = await store.hit_all("gcra", [(keys[0], TWO_PER_MINUTE, 2), (keys[1], LAYERS, 1)])
        assert found is not None
        assert [d.remaining for d in found] == [0, 2]
        assert await store.hit_all("gcra", [("a", LAYERS, 1), ("b", LAYERS, 1)]) is None
    finally:
        await store.aclose()
        await client.aclose()


# -- the Lua twin against the memory store, on random batches

#: Rates for every algorithm; the buckets also take the ones with a burst.
PLAIN_RATES = [Rate.parse("3/second"), Rate.parse("5/minute"), Rate.parse("7/10s")]
BURST_RATES = [Rate.parse("5/minute", burst=2), Rate.parse("2/second", burst=4)]
BUCKETS = {"gcra", "token_bucket", "leaky_bucket"}
_KEYS = _slot_keys(3)


def batches(rates: list[Rate]) -> st.SearchStrategy[list[tuple[int, list[Any]]]]:
    calls = st.lists(
        st.tuples(
            st.sampled_from(_KEYS),
            st.lists(st.sampled_from(rates), min_size=1, max_size=2, unique=True),
            st.integers(0, 4),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda call: call[0],
    )
    return st.lists(st.tuples(st.integers(0, 900_000), calls), min_size=1, max_size=12)


@pytest.mark.redis
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(algorithm=st.sampled_from(sorted(ALGORITHMS)), data=st.data())
def test_lua_and_memory_agree_on_random_batches(
    client: Client, algorithm: str, data: st.DataObject
) -> None:
    """Same batches, same clock: identical Decisions from the memory store and from Redis."""
    rates = PLAIN_RATES + (BURST_RATES if algorithm in BUCKETS else [])
    steps = data.draw(batches(rates))
    if isinstance(client, redis.RedisCluster):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushall()
    memory_clock, redis_clock = ManualClock(), ManualClock()
    memory = MemoryStore(clock=memory_clock)
    store = RedisStore(client, clock=redis_clock, timeout=STORE_TIMEOUT)
    for dt_us, calls in steps:
        memory_clock.advance(dt_us / 1_000_000)
        redis_clock.advance(dt_us / 1_000_000)
        batch = [(key, tuple(rates), cost) for key, rates, cost in calls]
        assert store.hit_all(algorithm, batch) == memory.hit_all(algorithm, batch)


#: A rate no test batch comes near, on a key of its own: with it a batch has a call of two
#: rates, which the memory store decides through its layered path.
_FAR = (Rate.parse("1000000/second"), Rate.parse("1000000/minute"))


@settings(max_examples=60, deadline=None)
@given(algorithm=st.sampled_from(sorted(ALGORITHMS)), data=st.data())
def test_one_rate_batches_decide_as_the_layered_path(algorithm: str, data: st.DataObject) -> None:
    """A batch whose calls each have one rate (the memory store's own path for them) gives
    the Decisions and leaves the state that the layered path gives the same calls."""
    rates = PLAIN_RATES + (BURST_RATES if algorithm in BUCKETS else [])
    steps = data.draw(batches(rates))
    one_clock, layered_clock = ManualClock(), ManualClock()
    one, layered = MemoryStore(clock=one_clock), MemoryStore(clock=layered_clock)
    for dt_us, calls in steps:
        one_clock.advance(dt_us / 1_000_000)
        layered_clock.advance(dt_us / 1_000_000)
        batch = [(key, (rates[0],), cost) for key, rates, cost in calls]
        assert (
            one.hit_all(algorithm, batch)
            == layered.hit_all(algorithm, [*batch, ("far", _FAR, 0)])[:-1]
        )
    far = {key for key in layered._states if isinstance(key, str) and key.startswith("far:")}
    assert list(one._states.items()) == [
        item for item in layered._states.items() if item[0] not in far
    ]
