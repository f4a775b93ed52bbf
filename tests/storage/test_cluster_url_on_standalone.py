"""A ``redis+cluster://`` URL pointed at a standalone redis-server is refused in one clear
sentence: the URL's host:port, what is there (a standalone server), and what to do (a
``redis://`` URL). It read "Redis at Redis Cluster 127.0.0.1:PORT is not a Redis Cluster:
Redis Cluster cannot be connected. Please provide at least one reachable node: Cluster mode
is not enabled on this node; use a redis:// URL ...", redis-py's words in the middle."""

from __future__ import annotations

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


def said(port: int) -> str:
    """What the store says for the standalone server at ``port``."""
    return (
        f"Redis at 127.0.0.1:{port} is a standalone server, not a Redis Cluster node "
        "(cluster mode is not enabled on it), so a cluster URL (redis+cluster://, "
        "valkey+cluster://) cannot use it; use a redis:// URL (or valkey://; rediss:// or "
        "valkeys:// over TLS) for a standalone server, or point the cluster URL at a "
        "cluster's nodes"
    )


def test_a_hit_and_a_ping_say_it_in_one_sentence(redis_server: RedisServer) -> None:
    """Both the blocking store's ``hit`` and its ``ping`` raise it, not as an outage."""
    url = f"redis+cluster://127.0.0.1:{redis_server.port}"
    store = RedisStore.from_url(url, timeout=1)
    try:
        for call in (lambda: store.hit("gcra", "k", RATE), store.ping):
            with pytest.raises(StorageError) as caught:
                call()
            assert not isinstance(caught.value, StorageUnavailableError)
            assert str(caught.value) == said(redis_server.port)
    finally:
        store.close()


async def test_the_asyncio_store_says_the_same(redis_server: RedisServer) -> None:
    """The asyncio Cluster client at a standalone server: the same sentence."""
    url = f"redis+cluster://127.0.0.1:{redis_server.port}/0"
    store = AsyncRedisStore.from_url(url, timeout=1)
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", "k", RATE)
        assert str(caught.value) == said(redis_server.port)
        with pytest.raises(StorageError) as caught:
            await store.ping()
        assert str(caught.value) == said(redis_server.port)
    finally:
        await store.aclose()


def test_several_nodes_are_named_as_given(redis_server: RedisServer) -> None:
    """Two standalone servers in the URL: both named, and what answered said."""
    other = RedisServer()
    try:
        nodes = f"127.0.0.1:{redis_server.port},127.0.0.1:{other.port}"
        store = RedisStore.from_url(f"redis+cluster://{nodes}", timeout=1)
        try:
            with pytest.raises(StorageError) as caught:
                store.hit("gcra", "k", RATE)
        finally:
            store.close()
    finally:
        other.stop()
    assert str(caught.value) == (
        f"Redis at {nodes}: a node that answered is a standalone server, not a Redis Cluster "
        "node (cluster mode is not enabled on it), and no node answered as one, so a cluster "
        "URL (redis+cluster://, valkey+cluster://) cannot use them; use a redis:// URL (or "
        "valkey://; rediss:// or valkeys:// over TLS) for a standalone server, or point "
        "the cluster URL at a cluster's nodes"
    )
