"""When Redis is down, hung or restarted: a bounded StorageUnavailableError, never a silent allow.

Elapsed times are asserted against a generous bound (0.5 s for a 20 ms store
timeout): the point is that a hit never hangs, not how fast it fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, RedisServer, SilentServer, free_port

pytestmark = pytest.mark.redis

RATE = Rate.parse("100/minute", burst=20)
TIMEOUT = 0.02
BOUND_S = 0.5


def fails_within_bound(hit: Callable[[], object]) -> StorageUnavailableError:
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as caught:
        hit()
    assert time.monotonic() - started < BOUND_S
    return caught.value


async def afails_within_bound(hit: Callable[[], object]) -> StorageUnavailableError:
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as caught:
        await hit()  # type: ignore[misc]
    assert time.monotonic() - started < BOUND_S
    return caught.value


@pytest.fixture
def used(make_redis: Callable[..., RedisServer]) -> Iterator[tuple[RedisServer, RedisStore]]:
    """A dedicated redis-server and a store on it that has decided one hit (19 left)."""
    server = make_redis()
    store = RedisStore(server.client(), clock=ManualClock(), timeout=TIMEOUT)
    assert store.hit("gcra", "k", RATE).remaining == 19
    yield server, store
    store.close()


@pytest.fixture
async def aused(
    make_redis: Callable[..., RedisServer],
) -> AsyncIterator[tuple[RedisServer, AsyncRedisStore]]:
    """The same with an asyncio store."""
    server = make_redis()
    client = aredis.Redis(host=HOST, port=server.port)
    store = AsyncRedisStore(client, clock=ManualClock(), timeout=TIMEOUT)
    assert (await store.hit("gcra", "k", RATE)).remaining == 19
    yield server, store
    await store.aclose()
    await client.aclose()


def test_a_closed_port_raises_unavailable_at_once() -> None:
    """Nothing listens: the hit fails with StorageUnavailableError naming the address."""
    port = free_port()
    store = RedisStore(redis.Redis(host=HOST, port=port), timeout=TIMEOUT)
    error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert f"{HOST}:{port}" in str(error)
    assert store.ping() is False


def test_a_server_that_never_answers_fails_within_the_store_timeout(
    silent_server: SilentServer,
) -> None:
    """A hung server fails the hit in about the timeout, even with a client that has none."""
    client = redis.Redis(host=HOST, port=silent_server.port, socket_timeout=None)
    store = RedisStore(client, timeout=TIMEOUT)
    fails_within_bound(lambda: store.hit("gcra", "k", RATE))
    fails_within_bound(lambda: store.hit("gcra", "k", RATE))


def test_a_paused_server_fails_the_hit_then_serves_again(
    used: tuple[RedisServer, RedisStore],
) -> None:
    """CLIENT PAUSE holds replies past the timeout: unavailable; after it, decisions resume."""
    server, store = used
    with server.client() as admin:
        admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
        error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))
        assert "did not answer within 0.02 s" in str(error)
        admin.ping()  # answered when the pause ends
    # Whether the timed-out hit ran is unknown, so only "it decides again" is certain.
    assert store.hit("gcra", "k", RATE).remaining in (17, 18)


def test_an_idle_connection_to_a_restarted_server_is_replaced_before_use(
    used: tuple[RedisServer, RedisStore], make_redis: Callable[..., RedisServer]
) -> None:
    """The server restarted between two hits: the stale connection is noticed and replaced."""
    server, store = used
    port = server.port
    server.stop()
    restarted = make_redis(port=port)
    # A fresh server: no state and no cached script, and no error for the caller.
    assert store.hit("gcra", "k", RATE).remaining == 19
    assert restarted.client().ping()


def test_a_stopped_server_fails_fast_and_is_used_again_once_back(
    make_redis: Callable[..., RedisServer],
) -> None:
    """While the server is down hits fail fast; once it is back they decide again."""
    server = make_redis()
    store = RedisStore(server.client(), clock=ManualClock(), timeout=TIMEOUT)
    store.hit("gcra", "k", RATE)
    port = server.port
    server.stop()
    fails_within_bound(lambda: store.hit("gcra", "k", RATE))
    make_redis(port=port)
    assert store.hit("gcra", "k", RATE).allowed


async def test_async_closed_port_raises_unavailable_at_once() -> None:
    """The asyncio store fails fast too, and ping says False."""
    store = AsyncRedisStore(aredis.Redis(host=HOST, port=free_port()), timeout=TIMEOUT)
    await afails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert await store.ping() is False
    await store.aclose()


async def test_async_server_that_never_answers_fails_every_waiter_in_time(
    silent_server: SilentServer,
) -> None:
    """64 hits in flight against a hung server all fail within the bound; none hangs."""
    client = aredis.Redis(host=HOST, port=silent_server.port, socket_timeout=None)
    store = AsyncRedisStore(client, timeout=TIMEOUT)
    started = time.monotonic()
    results = await asyncio.gather(
        *(store.hit("gcra", f"k{i % 4}", RATE) for i in range(64)), return_exceptions=True
    )
    assert time.monotonic() - started < BOUND_S
    assert all(isinstance(r, StorageUnavailableError) for r in results)
    await store.aclose()


async def test_async_paused_server_fails_waiters_then_serves_again(
    aused: tuple[RedisServer, AsyncRedisStore],
) -> None:
    """Replies held by CLIENT PAUSE: every waiting hit fails in time; afterwards hits decide."""
    server, store = aused
    with server.client() as admin:
        admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
        started = time.monotonic()
        results = await asyncio.gather(
            *(store.hit("gcra", "k", RATE) for _ in range(16)), return_exceptions=True
        )
        assert time.monotonic() - started < BOUND_S
        assert all(isinstance(r, StorageUnavailableError) for r in results)
        admin.ping()
    assert (await store.hit("gcra", "k", RATE)).allowed


async def test_async_idle_connection_to_a_restarted_server_is_replaced(
    aused: tuple[RedisServer, AsyncRedisStore], make_redis: Callable[..., RedisServer]
) -> None:
    """The asyncio store notices the closed connection and reconnects for the next hit."""
    server, store = aused
    port = server.port
    server.stop()
    make_redis(port=port)
    # The loop has not run since the server went away, so only the socket knows.
    assert (await store.hit("gcra", "k", RATE)).remaining == 19
