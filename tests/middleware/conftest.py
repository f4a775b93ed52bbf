"""Fixtures of the middleware tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from ratewarden import Limiter
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer
from tests.faults._load import TIMEOUT as FAULT_TIMEOUT
from tests.faults._proxy import FaultProxy

Proxied = Callable[..., tuple[FaultProxy, AsyncRedisStore]]


@pytest.fixture
async def proxied_store(make_redis: Callable[..., RedisServer]) -> AsyncIterator[Proxied]:
    """``proxied_store(**store_options)``: a fresh redis-server behind a fault proxy, and an
    AsyncRedisStore on the proxy with the fault tests' timeout; closed after the test."""
    made: list[tuple[FaultProxy, AsyncRedisStore]] = []

    def make(**options: Any) -> tuple[FaultProxy, AsyncRedisStore]:
        proxy = FaultProxy(make_redis().port)
        made.append((proxy, AsyncRedisStore.from_url(proxy.url, timeout=FAULT_TIMEOUT, **options)))
        return made[-1]

    yield make
    for proxy, store in made:
        await store.aclose()
        proxy.close()


@pytest.fixture(params=["memory", "redis"])
def sync_limiter(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Limiter]:
    """A Limiter on the memory store or on a real redis-server (emptied first)."""
    if request.param == "memory":
        yield Limiter(MemoryStore())
        return
    redis_server.client().flushall()
    store = RedisStore.from_url(redis_server.url, timeout=2.0)
    try:
        yield Limiter(store)
    finally:
        store.close()


@pytest.fixture(params=["memory", "redis"])
def async_store(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """An asyncio store: memory, or a real redis-server (emptied first)."""
    if request.param == "memory":
        return AsyncMemoryStore()
    redis_server.client().flushall()
    return AsyncRedisStore.from_url(redis_server.url, timeout=2.0)


@pytest.fixture
def stopped(make_redis: Callable[..., RedisServer]) -> Iterator[str]:
    """The URL of a redis-server that answered a ping and was then stopped."""
    server = make_redis()
    assert server.client().ping()
    server.stop()
    yield server.url
