"""A store URL of the wrong kind for the server is a settings mistake, not an outage: a
redis+cluster:// URL at a server without cluster mode is a StorageError saying to use
redis://, never a StorageUnavailableError that the failure mode would answer."""

from __future__ import annotations

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


def check(error: StorageError) -> None:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    assert "Cluster mode is not enabled" in message
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
