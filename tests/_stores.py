"""Every kind of store, for tests written once over all of them: memory, a real
redis-server and a 3-primary Redis Cluster, each sync and async."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from ratewarden import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer

#: ``kind-flavour`` of each store; the Redis ones carry their markers.
STORES = [
    "memory-sync",
    "memory-async",
    pytest.param("redis-sync", marks=pytest.mark.redis),
    pytest.param("redis-async", marks=pytest.mark.redis),
    pytest.param("cluster-sync", marks=[pytest.mark.redis, pytest.mark.cluster]),
    pytest.param("cluster-async", marks=[pytest.mark.redis, pytest.mark.cluster]),
]

Closers = list[Callable[[], Any]]


def make_store(
    request: pytest.FixtureRequest, name: str, clock: ManualClock, closers: Closers
) -> Any:
    """The store ``name`` (one of ``STORES``) on ``clock``. A Redis one runs on the session's
    server or Cluster, emptied first; what closes its clients goes to ``closers``."""
    kind, flavour = name.split("-")
    if kind == "memory":
        return MemoryStore(clock=clock) if flavour == "sync" else AsyncMemoryStore(clock=clock)
    from ratewarden.storage.redis import AsyncRedisStore, RedisStore

    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        sync_client: Any = redis.Redis(host="127.0.0.1", port=server.port)
        async_client: Any = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        sync_client.flushall()
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        port = cluster.nodes[0].port
        sync_client = redis.RedisCluster(host="127.0.0.1", port=port)
        async_client = redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
        sync_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    closers.extend((sync_client.close, async_client.aclose))
    if flavour == "sync":
        return RedisStore(sync_client, clock=clock, timeout=1.0)
    return AsyncRedisStore(async_client, clock=clock, timeout=1.0)


async def close_all(closers: Closers) -> None:
    """Call every closer, awaiting the asyncio ones."""
    for close in closers:
        result = close()
        if inspect.isawaitable(result):
            await result
