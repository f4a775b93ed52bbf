"""measure() refuses what it cannot measure with a ConfigurationError that says what it needs."""

from __future__ import annotations

import pytest
import redis

from ratewarden import ConfigurationError, MemoryStore, Rate
from ratewarden.storage.measure import measure
from ratewarden.storage.redis import AsyncRedisStore, RedisStore

RATE = Rate.parse("100/minute")


def test_a_url_is_refused_with_how_to_open_it() -> None:
    """A URL (the deprecated plan.measure's first argument) is refused by type, without
    echoing it (it may hold a password), and the message says to open it with from_url."""
    with pytest.raises(ConfigurationError) as raised:
        measure("redis://:secret@127.0.0.1:1/0", "gcra", RATE)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "measure needs a RedisStore, not a str" in message
    assert "RedisStore.from_url" in message
    assert "secret" not in message


@pytest.mark.parametrize(
    "make",
    [MemoryStore, lambda: AsyncRedisStore(redis.asyncio.Redis(port=1))],
    ids=["MemoryStore", "AsyncRedisStore"],
)
def test_another_store_is_refused_naming_it(make: object) -> None:
    """A memory store has no server to ask; an asyncio store's calls are coroutines. Both
    are refused before anything is sent, naming their type."""
    store = make()  # type: ignore[operator]
    with pytest.raises(ConfigurationError) as raised:
        measure(store, "gcra", RATE)
    name = type(store).__name__
    article = "an" if name.startswith("A") else "a"
    assert f"measure needs a RedisStore, not {article} {name}:" in str(raised.value)


@pytest.mark.parametrize(
    ("keywords", "said"),
    [
        ({"calls": 1.5}, "calls 1.5 must be an int from 1 to 1,000,000"),
        ({"calls": 0}, "calls 0 must be an int from 1 to 1,000,000"),
        ({"calls": True}, "calls True must be an int from 1 to 1,000,000"),
        ({"calls": 1_000_001}, "calls 1000001 must be an int from 1 to 1,000,000"),
        ({"key_length": 0}, "key_length 0 must be an int from 1 to 1,024"),
        ({"key_length": "32"}, "key_length '32' must be an int from 1 to 1,024"),
    ],
)
def test_bad_counts_are_refused_one_at_a_time(keywords: dict[str, object], said: str) -> None:
    """Each bad count is named alone, with its range (no Redis is reached: the port is shut)."""
    store = RedisStore(redis.Redis(port=1))
    with pytest.raises(ConfigurationError) as raised:
        measure(store, "gcra", RATE, **keywords)  # type: ignore[arg-type]
    assert str(raised.value) == f"measure: {said}"
