"""A Redis store given something other than its client says what to give, and names the type
as redis-py exports it (the blocking and the asyncio client are both called ``Redis``)."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aredis

from ratewarden.errors import ConfigurationError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore


@pytest.mark.parametrize("store", [RedisStore, AsyncRedisStore])
def test_a_url_points_at_from_url_and_is_not_shown(store: type) -> None:
    """A URL is the likeliest mistake: the message names from_url and hides the password."""
    with pytest.raises(ConfigurationError) as raised:
        store("redis://:secret@127.0.0.1:6379/0")
    name = store.__name__
    assert str(raised.value) == (
        f"{name} needs a redis client, not a str; open a URL with {name}.from_url(url)"
    )


def test_an_asyncio_client_is_named_as_redis_asyncio() -> None:
    """``RedisStore(redis.asyncio.Redis())`` used to say 'not Redis', which reads as the
    very client it asks for."""
    with pytest.raises(ConfigurationError) as raised:
        RedisStore(aredis.Redis(port=1))
    assert "client, not redis.asyncio.Redis; asyncio clients go to AsyncRedisStore" in str(
        raised.value
    )


def test_a_blocking_client_is_named_as_redis() -> None:
    """The asyncio store names the blocking client it was given the same way."""
    with pytest.raises(ConfigurationError) as raised:
        AsyncRedisStore(redis.Redis(port=1))
    assert "client, not redis.Redis; blocking clients go to RedisStore" in str(raised.value)
