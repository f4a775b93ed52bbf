"""A store URL of the wrong kind for the server is a settings mistake, not an outage: a
redis+cluster:// URL at a server without cluster mode is a StorageError saying to use
redis://, and a redis:// URL at a Cluster node (which answers MOVED for the keys of other
nodes' slots) one saying to use redis+cluster://; never a StorageUnavailableError that the
failure mode would answer (open: two thirds of the keys silently unlimited)."""

from __future__ import annotations

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage._plan import build
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisCluster, RedisServer

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


def check(error: StorageError) -> None:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    assert "is a standalone server, not a Redis Cluster node" in message
    assert "use a redis:// URL" in message


def test_a_cluster_url_at_a_plain_server_is_a_storage_error(redis_server: RedisServer) -> None:
    """Every hit is a StorageError naming the fix."""
    store = RedisStore.from_url(f"redis+cluster://127.0.0.1:{redis_server.port}", timeout=1)
    try:
        for _ in range(2):
            with pytest.raises(StorageError) as caught:
                store.hit("gcra", "k", RATE)
            check(caught.value)
    finally:
        store.close()


async def test_the_asyncio_store_says_the_same(redis_server: RedisServer) -> None:
    """The asyncio Cluster client at a plain server: the same StorageError."""
    store = AsyncRedisStore.from_url(f"redis+cluster://127.0.0.1:{redis_server.port}", timeout=1)
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", "k", RATE)
        check(caught.value)
    finally:
        await store.aclose()


def _keys_of_other_nodes(cluster: RedisCluster, port: int) -> list[str]:
    """Keys whose decisions go to another primary than the one at ``port``."""
    client = cluster.client()
    try:
        own = client.get_node(host="127.0.0.1", port=port)
        keys = [f"k{i}" for i in range(40)]
        first = {key: build("gcra", "rw", key, RATE, 1).keys[0] for key in keys}
        return [key for key in keys if client.get_node_from_key(first[key]).name != own.name]
    finally:
        client.close()


def check_moved(error: StorageError) -> None:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    assert "answered MOVED" in message
    assert "use redis+cluster://" in message


def test_a_plain_url_at_a_cluster_node_is_a_storage_error(redis_cluster: RedisCluster) -> None:
    """Keys of the node's own slots are decided; the others' MOVED is a StorageError."""
    port = redis_cluster.startup_nodes[0][1]
    others = _keys_of_other_nodes(redis_cluster, port)
    assert others
    store = RedisStore.from_url(f"redis://127.0.0.1:{port}", timeout=1)
    try:
        for key in others[:3]:
            with pytest.raises(StorageError) as caught:
                store.hit("gcra", key, RATE)
            check_moved(caught.value)
        with pytest.raises(StorageError) as caught:
            store.hit_all("gcra", [(others[0], RATE, 1)])
        check_moved(caught.value)
    finally:
        store.close()


async def test_the_asyncio_store_says_the_same_at_a_cluster_node(
    redis_cluster: RedisCluster,
) -> None:
    port = redis_cluster.startup_nodes[0][1]
    others = _keys_of_other_nodes(redis_cluster, port)
    store = AsyncRedisStore.from_url(f"redis://127.0.0.1:{port}", timeout=1)
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", others[0], RATE)
        check_moved(caught.value)
    finally:
        await store.aclose()
