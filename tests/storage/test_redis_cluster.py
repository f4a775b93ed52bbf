"""Redis Cluster routing: a stale slot table or an unreachable node does not lose decisions."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aredis
from redis.crc import key_slot

from ratewarden import Rate
from ratewarden.storage._plan import build
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT, RedisCluster, free_port

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

WORKED = Rate.parse("100/minute", burst=20)
KEY = "user:moved"


def slot_of(key: str) -> int:
    return key_slot(build("gcra", "rw", key, WORKED, 1).keys[0].encode())


def test_every_layer_of_a_decision_lands_in_one_slot() -> None:
    """All state keys of one decision share the caller's key as hash tag, hence one slot."""
    rates = [Rate.parse("2/second"), Rate.parse("100/hour"), Rate.parse("9/day")]
    keys = build("gcra", "rw", "a{b}c:%", rates, 1).keys
    assert len({key_slot(k.encode()) for k in keys}) == 1


def test_a_stale_slot_table_is_corrected_by_the_moved_reply(
    cluster_client: redis.RedisCluster,
) -> None:
    """The table points the slot at the wrong primary: MOVED is followed and the table fixed."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    slots = cluster_client.nodes_manager.slots_cache
    slot = slot_of(KEY)
    owner = slots[slot][0]
    slots[slot] = [next(n for n in cluster_client.get_primaries() if n.name != owner.name)]
    assert store.hit("gcra", KEY, WORKED).remaining == 19
    assert cluster_client.nodes_manager.get_node_from_slot(slot).name == owner.name
    assert store.hit("gcra", KEY, WORKED).remaining == 18


def test_an_unreachable_node_in_the_table_is_replaced_by_a_refresh(
    cluster_client: redis.RedisCluster,
) -> None:
    """The table names a node that is gone: nothing was sent, so the table is re-read and the
    decision goes to the slot's real primary."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    slot = slot_of(KEY)
    gone = redis.cluster.ClusterNode(HOST, free_port(), "primary")
    gone.redis_connection = redis.Redis(host=HOST, port=gone.port)
    cluster_client.nodes_manager.slots_cache[slot] = [gone]
    assert store.hit("gcra", KEY, WORKED).remaining == 19
    assert store.hit("gcra", KEY, WORKED).remaining == 18


async def test_async_stale_slot_table_is_corrected_by_the_moved_reply(
    redis_cluster: RedisCluster,
) -> None:
    """The asyncio store follows MOVED through the client too."""
    client = aredis.RedisCluster(host=HOST, port=redis_cluster.nodes[0].port)
    await client.initialize()
    await client.flushall(target_nodes=aredis.RedisCluster.PRIMARIES)
    store = AsyncRedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    slots = client.nodes_manager.slots_cache
    slot = slot_of(KEY)
    owner = slots[slot][0]
    slots[slot] = [next(n for n in client.get_primaries() if n.name != owner.name)]
    assert (await store.hit("gcra", KEY, WORKED)).remaining == 19
    assert client.nodes_manager.get_node_from_slot(slot).name == owner.name
    assert (await store.hit("gcra", KEY, WORKED)).remaining == 18
    await store.aclose()
    await client.aclose()


def test_ping_asks_every_primary(cluster_client: redis.RedisCluster) -> None:
    """ping is True only if every primary answers; a node gone from the table makes it False."""
    store = RedisStore(cluster_client, timeout=0.05)
    assert store.ping() is True
    gone = redis.cluster.ClusterNode(HOST, free_port(), "primary")
    gone.redis_connection = redis.Redis(host=HOST, port=gone.port)
    cluster_client.nodes_manager.nodes_cache[gone.name] = gone
    assert store.ping() is False
    del cluster_client.nodes_manager.nodes_cache[gone.name]
