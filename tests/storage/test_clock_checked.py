"""A clock= that is not a clock is refused where the store (or limiter) is built.

``MemoryStore(clock=5)`` and the memcache stores were built, then every hit raised
``AttributeError: 'int' object has no attribute 'now_us'``. ``ratewarden.clock.check_clock``
asks for what a store calls, a callable ``now_us``, and names the owner and ``clock``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ratewarden import Limiter, Rate
from ratewarden.clock import SystemClock
from ratewarden.errors import ConfigurationError
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer
from tests._servers import RedisServer

RATE = Rate.parse("5/second")


class NoNow:
    """Has now() but not now_us(): still not a clock a store can use."""

    def now(self) -> float:
        return 0.0


def refused(make: Callable[[], object], owner: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        make()
    message = str(caught.value)
    assert message.startswith(f"{owner}: clock ")
    assert "is not a clock: it has no now_us()" in message
    return message


@pytest.mark.parametrize(
    "clock", [5, "now", object(), NoNow()], ids=["int", "str", "object", "now-only"]
)
@pytest.mark.parametrize("store", [MemoryStore, AsyncMemoryStore], ids=["blocking", "asyncio"])
def test_the_memory_stores_refuse_a_clock_that_is_not_one(
    store: Callable[..., object], clock: object
) -> None:
    """MemoryStore(clock=5): a ConfigurationError naming the store and clock."""
    message = refused(lambda: store(clock=clock), store.__name__)  # type: ignore[attr-defined]
    assert type(clock).__name__ in message


@pytest.mark.parametrize("clock", [5, NoNow()], ids=["int", "now-only"])
@pytest.mark.parametrize("store", [MemcacheStore, AsyncMemcacheStore], ids=["blocking", "asyncio"])
def test_the_memcache_stores_refuse_a_clock_that_is_not_one(
    memcached_server: MemcachedServer, store: type[MemcacheStore], clock: object
) -> None:
    """from_url(url, clock=5) and the constructor refuse it before anything connects."""
    url = f"memcache://127.0.0.1:{memcached_server.port}"
    refused(lambda: store.from_url(url, clock=clock), store.__name__)
    refused(lambda: store(f"127.0.0.1:{memcached_server.port}", clock=clock), store.__name__)


@pytest.mark.parametrize("clock", [5, NoNow()], ids=["int", "now-only"])
@pytest.mark.parametrize("store", [RedisStore, AsyncRedisStore], ids=["blocking", "asyncio"])
def test_the_redis_stores_refuse_a_clock_that_is_not_one(
    redis_server: RedisServer, store: type[RedisStore], clock: object
) -> None:
    """from_url(url, clock=5) refuses it before anything connects, as the constructor does."""
    refused(lambda: store.from_url(redis_server.url, clock=clock), store.__name__)


def test_a_limiter_refuses_it_too() -> None:
    """Limiter(store, clock=5) would time its local parts with it: refused, naming Limiter."""
    refused(lambda: Limiter(MemoryStore(), clock=5), "Limiter")
    refused(lambda: Limiter(clock=5), "Limiter")


def test_a_clock_is_still_taken() -> None:
    """A ManualClock or a SystemClock instance passes, and decides."""
    clock = ManualClock()
    assert MemoryStore(clock=clock).hit("gcra", "k", RATE).allowed
    assert MemoryStore(clock=SystemClock()).hit("gcra", "k", RATE).allowed
