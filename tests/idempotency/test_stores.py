"""The idempotency store contract, the same for memory and Redis, sync and async."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.idempotency import Claim, StoredResponse
from ratewarden.storage.idempotency import (
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from ratewarden.testing import ManualClock
from tests.client._live import free_port
from tests.idempotency.conftest import Awaiting, unique_prefix

RESPONSE = StoredResponse(
    201, ((b"content-type", b"application/json"), (b"x-bin", b"\xe9\xff")), b'{"id":1}\x00\xff'
)


async def test_first_begin_acquires_and_a_second_sees_it_in_flight(any_store: Awaiting) -> None:
    """The first request takes the lock; a duplicate sees it in flight with its fingerprint."""
    assert await any_store.begin("k", "fp1", "tok-a", 30) == Claim("acquired")
    assert await any_store.begin("k", "fp2", "tok-b", 30) == Claim("in_flight", "fp1")


async def test_complete_stores_the_response_for_replay(any_store: Awaiting) -> None:
    """The holder's complete turns the lock into the response, bytes intact."""
    await any_store.begin("k", "fp1", "tok-a", 30)
    assert await any_store.complete("k", "tok-a", RESPONSE, 60) is True
    assert await any_store.begin("k", "fp1", "tok-b", 30) == Claim("done", "fp1", RESPONSE)


async def test_only_the_holder_can_complete_or_release(any_store: Awaiting) -> None:
    """Another token changes nothing; the holder's release frees the key for a retry."""
    await any_store.begin("k", "fp1", "tok-a", 30)
    assert await any_store.complete("k", "tok-x", RESPONSE, 60) is False
    await any_store.release("k", "tok-x")
    assert await any_store.begin("k", "fp1", "tok-b", 30) == Claim("in_flight", "fp1")
    await any_store.release("k", "tok-a")
    assert await any_store.begin("k", "fp1", "tok-c", 30) == Claim("acquired")


async def test_a_released_lock_cannot_be_completed(any_store: Awaiting) -> None:
    """After release, the old holder's late complete stores nothing."""
    await any_store.begin("k", "fp1", "tok-a", 30)
    await any_store.release("k", "tok-a")
    assert await any_store.complete("k", "tok-a", RESPONSE, 60) is False
    assert await any_store.begin("k", "fp1", "tok-b", 30) == Claim("acquired")


async def test_a_done_record_is_not_released_by_its_old_holder(any_store: Awaiting) -> None:
    """release after complete keeps the stored response."""
    await any_store.begin("k", "fp1", "tok-a", 30)
    await any_store.complete("k", "tok-a", RESPONSE, 60)
    await any_store.release("k", "tok-a")
    assert (await any_store.begin("k", "fp1", "tok-b", 30)).state == "done"


def test_memory_lock_expires_so_a_crashed_request_blocks_nobody() -> None:
    """After lock_ttl a new request acquires; the crashed holder's complete is refused."""
    clock = ManualClock()
    store = MemoryIdempotencyStore(clock=clock)
    store.begin("k", "fp", "crashed", 10)
    clock.advance(9.9)
    assert store.begin("k", "fp", "b", 10).state == "in_flight"
    clock.advance(0.1)
    assert store.begin("k", "fp", "b", 10) == Claim("acquired")
    assert store.complete("k", "crashed", RESPONSE, 60) is False


def test_memory_record_expires_after_ttl() -> None:
    """A stored response is replayed for ttl seconds, then the key is new again."""
    clock = ManualClock()
    store = MemoryIdempotencyStore(clock=clock)
    store.begin("k", "fp", "a", 10)
    store.complete("k", "a", RESPONSE, 3600)
    clock.advance(3599)
    assert store.begin("k", "fp", "b", 10).state == "done"
    clock.advance(1)
    assert store.begin("k", "fp", "b", 10).state == "acquired"


def test_memory_store_is_bounded_by_entries_and_bytes() -> None:
    """Past max_entries or max_bytes the oldest stored responses go first."""
    store = MemoryIdempotencyStore(clock=ManualClock(), max_entries=3)
    for key in "abcd":
        store.begin(key, "fp", "t", 10)
        store.complete(key, "t", RESPONSE, 60)
    assert len(store) == 3
    assert store.begin("a", "fp", "t2", 10).state == "acquired"  # "a" was evicted

    small = MemoryIdempotencyStore(clock=ManualClock(), max_bytes=2000)
    for key in "xyz":
        small.begin(key, "fp", "t", 10)
        small.complete(key, "t", StoredResponse(200, (), b"." * 700), 60)
    assert len(small) == 2
    assert small.begin("x", "fp", "t2", 10).state == "acquired"


def test_memory_store_refuses_a_response_larger_than_its_byte_bound() -> None:
    """complete raises StorageError when the response alone exceeds max_bytes: nothing is
    replayed, and the key is free again."""
    store = MemoryIdempotencyStore(clock=ManualClock(), max_bytes=1000)
    store.begin("k", "fp", "t", 10)
    with pytest.raises(StorageError, match="does not fit"):
        store.complete("k", "t", StoredResponse(200, (), b"." * 5000), 60)
    assert store.begin("k", "fp", "t2", 10).state == "acquired"


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_memory_store_bounds_must_be_positive_whole_numbers(bad: object) -> None:
    """A bad bound is a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match="max_entries"):
        MemoryIdempotencyStore(max_entries=bad)  # type: ignore[arg-type]


def test_redis_records_carry_their_ttls(sync_redis: redis.Redis) -> None:
    """The lock lives lock_ttl (SET NX PX), the stored response ttl, both in Redis."""
    prefix = unique_prefix()
    store = RedisIdempotencyStore(sync_redis, prefix=prefix)
    store.begin("k", "fp", "a", 2.5)
    assert 0 < sync_redis.pttl(prefix + "k") <= 2500
    store.complete("k", "a", RESPONSE, 600)
    assert 2500 < sync_redis.pttl(prefix + "k") <= 600_000


def test_redis_foreign_value_is_a_storage_error(sync_redis: redis.Redis) -> None:
    """Something else under the prefix is reported, not misread as a record."""
    prefix = unique_prefix()
    sync_redis.set(prefix + "k", b"hello")
    with pytest.raises(StorageError, match="not ratewarden's"):
        RedisIdempotencyStore(sync_redis, prefix=prefix).begin("k", "fp", "a", 5)


def test_redis_unreachable_is_storage_unavailable() -> None:
    """A closed port raises StorageUnavailableError, which the middleware acts on."""
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    store = RedisIdempotencyStore(client)
    with pytest.raises(StorageUnavailableError):
        store.begin("k", "fp", "a", 5)


async def test_async_redis_unreachable_is_storage_unavailable() -> None:
    """The asyncio store maps the same failure the same way."""
    client = aredis.Redis(
        port=free_port(), socket_connect_timeout=0.2, retry=AsyncRetry(NoBackoff(), 0)
    )
    with pytest.raises(StorageUnavailableError):
        await AsyncRedisIdempotencyStore(client).begin("k", "fp", "a", 5)
    await client.aclose()


def test_redis_prefix_must_be_a_non_empty_string(sync_redis: redis.Redis) -> None:
    """An empty prefix would put records among the application's own keys."""
    with pytest.raises(ConfigurationError, match="prefix"):
        RedisIdempotencyStore(sync_redis, prefix="")
