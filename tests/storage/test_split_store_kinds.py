"""AsyncSplitStore refuses, when built, a store that is not an asyncio store: a blocking store,
a URL or anything without ``hit`` would only fail at the first call routed to it."""

from __future__ import annotations

import asyncio

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, MemoryStore, Rate
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.split import AsyncSplitStore


@pytest.mark.parametrize("which", ["store", "per_second_store"])
def test_a_blocking_store_is_refused_naming_the_argument(which: str) -> None:
    """A MemoryStore either side is refused as a blocking store, naming which argument it is."""
    stores = {"store": AsyncMemoryStore(), "per_second_store": AsyncMemoryStore()}
    stores[which] = MemoryStore()  # type: ignore[assignment]
    with pytest.raises(ConfigurationError) as raised:
        AsyncSplitStore(**stores)  # type: ignore[arg-type]
    assert str(raised.value).startswith(
        f"AsyncSplitStore: {which} is a MemoryStore, a blocking store;"
    )


def test_a_url_is_refused_by_type_with_how_to_open_it() -> None:
    """A URL is named by type only (it may hold a password) and the cure is from_url."""
    with pytest.raises(ConfigurationError) as raised:
        AsyncSplitStore("redis://:secret@x:1/0", AsyncMemoryStore())  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith("AsyncSplitStore: store is a str, not a store;")
    assert "AsyncRedisStore.from_url(url)" in message
    assert "secret" not in message


def test_anything_without_hit_is_refused() -> None:
    """An object with no hit at all is not a store."""
    with pytest.raises(ConfigurationError, match="per_second_store is an object, not a store"):
        AsyncSplitStore(AsyncMemoryStore(), object())  # type: ignore[arg-type]


def test_a_wrapper_of_the_callers_returning_awaitables_is_taken() -> None:
    """A store of the caller's whose plain hit hands on an asyncio store's awaitables is an
    asyncio store as AsyncLimiter takes it: the split store takes it too, and it decides."""

    class Wrapper:
        def __init__(self, inner: AsyncMemoryStore) -> None:
            self.inner = inner
            self.clock = inner.clock

        def hit(self, *args: object) -> object:
            return self.inner.hit(*args)  # type: ignore[arg-type]

    async def scenario() -> None:
        split = AsyncSplitStore(AsyncMemoryStore(), Wrapper(AsyncMemoryStore()))  # type: ignore[arg-type]
        decision = await AsyncLimiter(split).hit("k", Rate.parse("1/second"))
        assert decision.allowed

    asyncio.run(scenario())
