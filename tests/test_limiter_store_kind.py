"""A limiter, and everything built over one, refuses a store of the other twin when it is made.

A blocking ``Limiter`` over an asyncio store got a coroutine for each decision, which is
true, so ``if limiter.hit(...)`` admitted everything; an ``AsyncLimiter`` over a blocking
store failed at its first call. Both are refused at construction, naming the store's type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.budgets import AsyncFairShare, AsyncTokenBudget, FairShare, TokenBudget
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import AsyncCellLimiter, CellLimiter
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.tiers import AsyncTwoTier, TwoTier

RATES = {"tokens": "1000/minute"}

#: (what is built over a store, whether it awaits its store)
BUILDERS: list[tuple[Callable[[Any], object], bool]] = [
    (Limiter, False),
    (AsyncLimiter, True),
    (TwoTier, False),
    (AsyncTwoTier, True),
    (lambda store: TokenBudget(store, RATES, max_output_tokens=0), False),
    (lambda store: AsyncTokenBudget(store, RATES, max_output_tokens=0), True),
    (lambda store: FairShare(store, "100/s", {"a": 1}), False),
    (lambda store: AsyncFairShare(store, "100/s", {"a": 1}), True),
    (lambda store: CellLimiter(store, 3), False),
    (lambda store: AsyncCellLimiter(store, 3), True),
]


@pytest.mark.parametrize(("build", "awaited"), BUILDERS)
def test_a_memory_store_of_the_other_twin_is_refused(
    build: Callable[[Any], object], awaited: bool
) -> None:
    """Each blocking builder refuses an AsyncMemoryStore, each asyncio one a MemoryStore,
    and takes its own."""
    wrong, right = (MemoryStore(), AsyncMemoryStore()) if awaited else (
        AsyncMemoryStore(), MemoryStore())  # fmt: skip
    kind = "a blocking store" if awaited else "an asyncio store"
    with pytest.raises(ConfigurationError, match=f"store is an? {type(wrong).__name__}, {kind}"):
        build(wrong)
    build(right)


@pytest.mark.parametrize(("build", "awaited"), BUILDERS[:2] + BUILDERS[4:6])
def test_a_redis_store_of_the_other_twin_is_refused(
    build: Callable[[Any], object], awaited: bool, redis_client: redis.Redis
) -> None:
    """The same on a real redis-server: RedisStore for the asyncio twins, AsyncRedisStore
    for the blocking ones, refused; nothing is written."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    url = f"redis://127.0.0.1:{port}/0"
    wrong = RedisStore.from_url(url) if awaited else AsyncRedisStore.from_url(url)
    with pytest.raises(ConfigurationError, match=type(wrong).__name__):
        build(wrong)
    assert redis_client.dbsize() == 0


def test_a_blocking_limiter_over_an_asyncio_store_no_longer_admits_everything() -> None:
    """The old failure, end to end: three an hour, asked five times, admitted three. (On the
    system clock: at three a second, five hits slower than a third of a second got a token
    back.)"""
    limiter = Limiter(MemoryStore())
    rate = Rate.parse("3/hour")
    assert [bool(limiter.hit("k", rate)) for _ in range(5)] == [True] * 3 + [False] * 2
    with pytest.raises(ConfigurationError):
        Limiter(AsyncMemoryStore())


@pytest.mark.parametrize("given", ["redis://user:secret@127.0.0.1:6379/0", 42, object()])
def test_something_that_is_not_a_store_is_refused_by_its_type(given: object) -> None:
    """A URL or any other object is refused by its type name: a URL's password is not shown."""
    with pytest.raises(ConfigurationError, match="not a store") as info:
        Limiter(given)
    assert "secret" not in str(info.value)
    assert type(given).__name__ in str(info.value)


@pytest.mark.parametrize(
    ("build", "stores"),
    [
        (Limiter, "give a MemoryStore, RedisStore.from_url(url), or another blocking store"),
        (
            AsyncLimiter,
            "give an AsyncMemoryStore, AsyncRedisStore.from_url(url), or another asyncio store",
        ),
    ],
)
def test_something_that_is_not_a_store_is_told_the_stores_of_its_twin(
    build: Callable[[Any], object], stores: str
) -> None:
    """``AsyncLimiter("redis://x")`` used to suggest MemoryStore and RedisStore, which it
    then refuses as blocking; each twin now suggests its own."""
    with pytest.raises(ConfigurationError) as info:
        build("redis://x")
    assert stores in str(info.value)
