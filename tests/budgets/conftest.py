"""Budgets on every store: memory, Redis and a 3-primary Cluster, sync and async.

``stores`` is a factory of ``Harness`` objects that hide the sync/async split
behind one awaitable interface, so each test is written once.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio

from ratewarden import AsyncMemoryStore, MemoryStore, Rate
from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer

STORES = [
    "memory-sync",
    "memory-async",
    pytest.param("redis-sync", marks=pytest.mark.redis),
    pytest.param("redis-async", marks=pytest.mark.redis),
    pytest.param("cluster-sync", marks=[pytest.mark.redis, pytest.mark.cluster]),
    pytest.param("cluster-async", marks=[pytest.mark.redis, pytest.mark.cluster]),
]


async def settle(value: Any) -> Any:
    """Await ``value`` if it is awaitable (the async twins), else return it."""
    return await value if inspect.isawaitable(value) else value


@dataclass
class Harness:
    """One store of the parametrized kind, on a ManualClock."""

    kind: str
    store: Any
    clock: ManualClock

    @property
    def is_async(self) -> bool:
        return self.kind.endswith("async")

    def budget(self, limits: Mapping[str, Rate | str], **options: Any) -> Any:
        cls = AsyncTokenBudget if self.is_async else TokenBudget
        return cls(self.store, limits, **options)


@pytest.fixture(params=STORES)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., Harness]]:
    """A factory: ``stores(start=...)`` -> Harness on the parametrized store."""
    kind, flavour = request.param.split("-")
    closers: list[Any] = []

    def factory(start: float = 1_700_000_000.0) -> Harness:
        clock = ManualClock(start)
        if kind == "memory":
            store: Any = (
                MemoryStore(clock=clock) if flavour == "sync" else AsyncMemoryStore(clock=clock)
            )
            return Harness(request.param, store, clock)
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
            store = RedisStore(sync_client, clock=clock, timeout=1.0)
        else:
            store = AsyncRedisStore(async_client, clock=clock, timeout=1.0)
        return Harness(request.param, store, clock)

    yield factory
    for close in closers:
        await settle(close())
