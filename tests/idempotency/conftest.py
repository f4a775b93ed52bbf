"""Idempotency stores for the contract tests (memory and Redis, sync and async), and an order
name of each test for the middleware tests."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from ratewarden.testing import ManualClock
from tests._servers import RedisServer

_prefixes = itertools.count()


def unique_prefix() -> str:
    """A key prefix no other test uses, so tests can share one redis-server."""
    return f"t{next(_prefixes)}:idem:"


class Awaiting:
    """Calls a sync or async store the same way: ``await s.begin(...)`` either way."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.store, name)

        async def call(*args: Any) -> Any:
            result = method(*args)
            return await result if inspect.isawaitable(result) else result

        return call


@pytest.fixture(params=["memory", "async-memory", "redis", "async-redis"])
async def any_store(request: pytest.FixtureRequest) -> AsyncIterator[Awaiting]:
    """Each store kind, behind one awaitable face."""
    kind = request.param
    if kind == "memory":
        yield Awaiting(MemoryIdempotencyStore(clock=ManualClock()))
    elif kind == "async-memory":
        yield Awaiting(AsyncMemoryIdempotencyStore(clock=ManualClock()))
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        if kind == "redis":
            client = server.client()
            yield Awaiting(RedisIdempotencyStore(client, prefix=unique_prefix()))
            client.close()
        else:
            aclient = aredis.Redis(host="127.0.0.1", port=server.port)
            yield Awaiting(AsyncRedisIdempotencyStore(aclient, prefix=unique_prefix()))
            await aclient.aclose()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """An order name of this test alone."""
    return request.node.name.replace("[", "-").replace("]", "")


@pytest.fixture
def sync_redis(redis_server: RedisServer) -> redis.Redis:
    """A plain client on the session's redis-server, for looking at keys."""
    return redis_server.client()
