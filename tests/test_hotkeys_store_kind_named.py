"""The hot-key classes refuse a store of the other twin in their own name, naming their own
twin: the caller built a CellLimiter or a HotKeyLimiter, never the Limiter inside it."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError, MemoryStore
from ratewarden.hotkeys import AsyncCellLimiter, AsyncHotKeyLimiter, CellLimiter, HotKeyLimiter
from ratewarden.storage.memory import AsyncMemoryStore


def test_cell_limiters_name_themselves_and_their_twin() -> None:
    """An asyncio store for CellLimiter, a blocking one for AsyncCellLimiter."""
    with pytest.raises(ConfigurationError) as raised:
        CellLimiter(AsyncMemoryStore(), 3)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "CellLimiter: store is an AsyncMemoryStore, an asyncio store; CellLimiter needs a "
        "blocking store (MemoryStore, RedisStore, ...), or use AsyncCellLimiter"
    )
    with pytest.raises(ConfigurationError) as raised:
        AsyncCellLimiter(MemoryStore(), 3)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "AsyncCellLimiter: store is a MemoryStore, a blocking store; AsyncCellLimiter needs an "
        "asyncio store (AsyncMemoryStore, AsyncRedisStore, ...), or use CellLimiter"
    )


def test_a_hot_key_limiter_says_its_store_is_of_the_other_twin() -> None:
    """Its store is checked before it is compared with the mitigation's: an asyncio store is
    named as such, not as "another store"."""
    with pytest.raises(ConfigurationError) as raised:
        HotKeyLimiter(AsyncMemoryStore(), CellLimiter(MemoryStore(), 3))  # type: ignore[arg-type]
    assert str(raised.value).startswith(
        "HotKeyLimiter: store is an AsyncMemoryStore, an asyncio store; HotKeyLimiter needs a "
        "blocking store"
    )
    with pytest.raises(ConfigurationError) as raised:
        AsyncHotKeyLimiter(MemoryStore(), AsyncCellLimiter(AsyncMemoryStore(), 3))  # type: ignore[arg-type]
    assert str(raised.value).endswith("or use HotKeyLimiter")


def test_two_stores_of_the_right_kind_are_still_refused_as_two_stores() -> None:
    """Two MemoryStores: the mitigation keeps other state; the message says to share one."""
    with pytest.raises(ConfigurationError) as raised:
        HotKeyLimiter(MemoryStore(), CellLimiter(MemoryStore(), 3))
    assert str(raised.value) == (
        "the mitigation must use the same store as the HotKeyLimiter (the same object: "
        "HotKeyLimiter(store, CellLimiter(store, ...)))"
    )


def test_other_refusals_of_the_limiter_pass_through_unchanged() -> None:
    """An unknown algorithm is the limiter's own message, not reworded."""
    with pytest.raises(ConfigurationError, match="unknown algorithm 'gcrx'"):
        CellLimiter(MemoryStore(), 3, "gcrx")
