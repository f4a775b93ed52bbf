"""Options that would break every request are refused when the middleware or store is
built, with a ConfigurationError naming them; the bounds that are taken work on Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.idempotency import StoredResponse
from ratewarden.middleware._idempotency_checks import MAX_SECONDS
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from tests.idempotency.conftest import unique_prefix


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app the middleware wraps (never called here)."""


def _wsgi(environ: Any, start_response: Any) -> list[bytes]:
    """A WSGI app the middleware wraps (never called here)."""
    return []


@pytest.mark.parametrize("cls", [MemoryIdempotencyStore, AsyncMemoryIdempotencyStore])
def test_a_clock_that_is_not_one_is_refused(cls: type[Any]) -> None:
    """clock=time (the module) has no now_us: refused when built, not a 500 per request."""
    with pytest.raises(ConfigurationError, match=rf"{cls.__name__}: clock .*no now_us"):
        cls(clock=time)


async def _who(scope: Any) -> str:
    return "someone"


class _AsyncCaller:
    async def __call__(self, scope: Any) -> str:
        return "someone"


@pytest.mark.parametrize("identity", [_who, _AsyncCaller()], ids=["function", "object"])
def test_an_async_identity_is_refused(identity: Any) -> None:
    """An async identity would hand the middleware a coroutine at every request (a 500):
    refused on ASGI and WSGI, saying it is called without awaiting."""
    with pytest.raises(ConfigurationError, match="async function: the middleware calls it"):
        IdempotencyMiddleware(_app, AsyncMemoryIdempotencyStore(), identity=identity)
    with pytest.raises(ConfigurationError, match="plain function of the environ"):
        WSGIIdempotencyMiddleware(_wsgi, MemoryIdempotencyStore(), identity=identity)


@pytest.mark.parametrize(
    ("name", "value"), [("lock_ttl", 1e16), ("ttl", 1e300), ("ttl", MAX_SECONDS + 1)]
)
def test_durations_past_the_bound_are_refused(name: str, value: float) -> None:
    """A lock_ttl or ttl past 1,000,000,000 s overflows Redis's PX (a 503, or nothing stored,
    at every request): refused for every store."""
    with pytest.raises(ConfigurationError, match=rf"{name}=.*at most 1,000,000,000"):
        IdempotencyMiddleware(_app, AsyncMemoryIdempotencyStore(), **{name: value})


def test_the_longest_durations_taken_work_on_redis(sync_redis: redis.Redis) -> None:
    """MAX_SECONDS as lock_ttl and ttl: Redis takes both (the lock, then the response)."""
    IdempotencyMiddleware(_app, AsyncMemoryIdempotencyStore(), lock_ttl=MAX_SECONDS, ttl=1e9)
    prefix = unique_prefix()
    store = RedisIdempotencyStore(sync_redis, prefix=prefix)
    assert store.begin("k", "fp", "t", MAX_SECONDS).state == "acquired"
    assert store.complete("k", "t", StoredResponse(201, (), b"ok"), MAX_SECONDS) is True
    assert sync_redis.pttl(prefix + "k") > (MAX_SECONDS - 60) * 1000


def test_a_redis_refusal_says_what_redis_said(sync_redis: redis.Redis) -> None:
    """The StorageError (and so the middleware's log line) carries Redis's own words, not
    only redis-py's bare ``server:ResponseError``."""
    store = RedisIdempotencyStore(sync_redis, prefix=unique_prefix())
    with pytest.raises(
        StorageError, match=r"ResponseError: value is not an integer or out of range"
    ):
        store.begin("k", "fp", "t", 1e16)


def test_no_methods_is_refused() -> None:
    """methods=[] would make the middleware guard nothing: refused, naming the default."""
    with pytest.raises(ConfigurationError, match=r"methods=\[\]: no method"):
        IdempotencyMiddleware(_app, AsyncMemoryIdempotencyStore(), methods=[])
    with pytest.raises(ConfigurationError, match="no method"):
        WSGIIdempotencyMiddleware(_wsgi, MemoryIdempotencyStore(), methods=())
