"""A Sentinel URL pointed at something that is not a sentinel: the error names each host as
``sentinel HOST:PORT`` and what it answered, not redis-py's long client reprs. Every host
answered as no sentinel does, so it is a ``StorageError`` (a setting, which waiting will not
fix; ``ratewarden serve`` refuses to start on it), not an outage."""

from __future__ import annotations

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


def check(message: str, server: RedisServer) -> None:
    assert f"sentinel 127.0.0.1:{server.port} - " in message
    assert "unknown command 'SENTINEL'" in message
    assert "no host answered as a Sentinel" in message
    assert "waiting will not help" in message
    assert "redis.client" not in message
    assert "ConnectionPool" not in message
    assert len(message) < 600, message


def test_a_plain_redis_as_the_sentinel_gives_a_readable_error(redis_server: RedisServer) -> None:
    """The blocking store: one short line naming the host and its answer."""
    store = RedisStore.from_url(f"redis+sentinel://127.0.0.1:{redis_server.port}/m", timeout=1)
    try:
        with pytest.raises(StorageError) as caught:
            store.hit("gcra", "k", RATE)
        assert not isinstance(caught.value, StorageUnavailableError)
        check(str(caught.value), redis_server)
    finally:
        store.close()


async def test_the_asyncio_store_gives_the_same_readable_error(redis_server: RedisServer) -> None:
    """The asyncio store's message is shortened the same way."""
    store = AsyncRedisStore.from_url(f"redis+sentinel://127.0.0.1:{redis_server.port}/m", timeout=1)
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", "k", RATE)
        assert not isinstance(caught.value, StorageUnavailableError)
        check(str(caught.value), redis_server)
    finally:
        await store.aclose()
