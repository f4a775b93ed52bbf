"""An ACL user that may not run CLIENT SETNAME, given ``client_name=``: the refusal says so,
not that the user and password are wrong (they are right)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


@pytest.fixture
def no_client_user(redis_client: redis.Redis) -> Iterator[str]:
    """A user with every command but CLIENT's; removed after the test."""
    redis_client.execute_command("ACL", "SETUSER", "noclient", "on", ">pw", "~*", "&*", "+@all")
    redis_client.execute_command("ACL", "SETUSER", "noclient", "-client")
    yield "noclient:pw"
    redis_client.execute_command("ACL", "DELUSER", "noclient")


def check(error: StorageError) -> None:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    assert "CLIENT SETNAME" in message
    assert "client_name" in message
    assert "check the user and password" not in message
    assert ":pw" not in message


def test_the_blocking_store_says_the_acl_forbids_client_setname(
    redis_client: redis.Redis, no_client_user: str
) -> None:
    """Each hit is a StorageError naming CLIENT SETNAME and client_name=."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    store = RedisStore.from_url(
        f"redis://{no_client_user}@127.0.0.1:{port}/0", timeout=1, client_name="api"
    )
    try:
        with pytest.raises(StorageError) as caught:
            store.hit("gcra", "k", RATE)
        check(caught.value)
    finally:
        store.close()


async def test_the_asyncio_store_says_the_acl_forbids_client_setname(
    redis_client: redis.Redis, no_client_user: str
) -> None:
    """The asyncio store's own connection is refused the same way."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    store = AsyncRedisStore.from_url(
        f"redis://{no_client_user}@127.0.0.1:{port}/0", timeout=1, client_name="api"
    )
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", "k", RATE)
        check(caught.value)
    finally:
        await store.aclose()
