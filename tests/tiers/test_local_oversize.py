"""A cost the local bucket can never hold is the store's to decide, not the bucket's.

``local=0.25`` of 10/minute gives each process a bucket of 2. A request of cost 3
never fits it: the bucket used to deny it forever (``retry_after=inf``, no store
call) though the store, which holds 10, would admit it. Now it goes to the store;
the bucket counts nothing for it, and still denies what it can hold. In an
outage under ``failure_mode="local"`` such a request is denied (no process may
admit more than its bucket) with the wait of the breaker's next probe, not forever.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import Decision, Rate
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, CircuitBreaker, TwoTier
from tests._servers import RedisServer
from tests.tiers._helpers import SwitchableStore

RATE = Rate.parse("10/minute")
COOLDOWN = 5.0


class _Blocking:
    """An AsyncTwoTier as a blocking limiter: each hit run on the event loop of the test's
    ``main`` from the worker thread the checks run in (async stores are bound to one loop)."""

    def __init__(self, tiers: AsyncTwoTier) -> None:
        self.tiers = tiers
        self.counts = tiers.counts
        self.loop = asyncio.get_running_loop()

    def hit(self, *args: Any, **kwargs: Any) -> Decision:
        future = asyncio.run_coroutine_threadsafe(self.tiers.hit(*args, **kwargs), self.loop)
        return future.result(10)


def check_async(check: Callable[..., None], tiers: AsyncTwoTier, *args: Any) -> None:
    """Run ``check(blocking view of tiers, *args)`` against an AsyncTwoTier, then close its
    store."""

    async def main() -> None:
        try:
            await asyncio.to_thread(check, _Blocking(tiers), *args)
        finally:
            await tiers.store.aclose()

    asyncio.run(main())


def check_oversize_goes_to_the_store(tiers: Any) -> None:
    """Cost 3 (over the bucket's 2) is decided by the store: three admitted (9 of 10), the
    fourth denied by the store with a finite wait; the bucket, which saw none of them,
    still admits 2 of cost 1 and denies the third itself."""
    key, other = f"{uuid.uuid4().hex}:k", f"{uuid.uuid4().hex}:other"
    first = tiers.hit(key, RATE, 3)
    assert first.allowed and first.limit == 10 and first.remaining == 7
    assert tiers.hit(key, RATE, 3).allowed
    assert tiers.hit(key, RATE, 3).allowed
    fourth = tiers.hit(key, RATE, 3)
    assert not fourth.allowed and fourth.limit == 10
    assert 0 < fourth.retry_after < 60
    assert tiers.counts.store_calls == 4 and tiers.counts.local_denials == 0

    assert tiers.hit(other, RATE, 1).allowed
    assert tiers.hit(other, RATE, 1).allowed
    local = tiers.hit(other, RATE, 1)
    assert not local.allowed and local.limit == 2  # the bucket's own denial
    assert tiers.counts.local_denials == 1 and tiers.counts.store_calls == 6


def test_a_cost_above_the_local_bucket_is_decided_by_the_memory_store() -> None:
    """MemoryStore: the store decides cost 3 under local=0.25 of 10/minute."""
    check_oversize_goes_to_the_store(TwoTier(MemoryStore(clock=ManualClock()), local=0.25))


def test_a_cost_above_the_local_bucket_is_decided_by_the_async_memory_store() -> None:
    """AsyncMemoryStore: the asyncio twin decides alike."""
    tiers = AsyncTwoTier(AsyncMemoryStore(clock=ManualClock()), local=0.25)
    check_async(check_oversize_goes_to_the_store, tiers)


@pytest.mark.redis
def test_a_cost_above_the_local_bucket_is_decided_by_redis(redis_server: RedisServer) -> None:
    """A real redis-server decides cost 3 under local=0.25 of 10/minute."""
    store = RedisStore.from_url(redis_server.url, clock=ManualClock(), timeout=1.0)
    try:
        check_oversize_goes_to_the_store(TwoTier(store, local=0.25))
    finally:
        store.close()


@pytest.mark.redis
def test_a_cost_above_the_local_bucket_is_decided_by_async_redis(
    redis_server: RedisServer,
) -> None:
    """The asyncio twin over AsyncRedisStore decides alike."""
    store = AsyncRedisStore.from_url(redis_server.url, clock=ManualClock(), timeout=1.0)
    check_async(check_oversize_goes_to_the_store, AsyncTwoTier(store, local=0.25))


def check_outage(tiers: Any, down: Callable[[], None]) -> None:
    """With the store unavailable and failure_mode local: cost 3 is denied (degraded local)
    with a finite wait, the breaker's; cost 1 is still decided by the bucket (2 admitted)."""
    key = uuid.uuid4().hex
    down()
    oversize = tiers.hit(key, RATE, 3)
    assert not oversize.allowed and oversize.degraded == "local"
    assert 0 < oversize.retry_after <= COOLDOWN
    small = [tiers.hit(key, RATE, 1) for _ in range(3)]
    assert [d.allowed for d in small] == [True, True, False]
    assert {d.degraded for d in small[:2]} == {"local"}


def test_in_an_outage_the_local_failure_mode_denies_a_cost_above_the_bucket() -> None:
    """A store raising StorageUnavailableError (memory, the pure-logic twin of the Redis
    tests below): the oversize request is denied until the breaker probes, not forever."""
    clock = ManualClock()
    store = SwitchableStore(clock=clock)
    breaker = CircuitBreaker(failures=100, cooldown=COOLDOWN, clock=clock)
    tiers = TwoTier(store, local=0.25, failure_mode="local", breaker=breaker)

    def down() -> None:
        store.down = True

    check_outage(tiers, down)


@pytest.mark.redis
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "asyncio"])
def test_with_redis_killed_the_local_failure_mode_denies_a_cost_above_the_bucket(
    make_redis: Callable[..., RedisServer], sync: bool
) -> None:
    """A real redis-server killed: sync and asyncio deny cost 3 (degraded local, the
    breaker's wait) and decide cost 1 on the bucket."""
    server = make_redis()
    clock = ManualClock()
    breaker = CircuitBreaker(failures=100, cooldown=COOLDOWN, clock=clock)

    def down() -> None:
        server.process.kill()
        server.process.wait(5)

    if sync:
        store = RedisStore.from_url(server.url, clock=clock, timeout=0.05)
        try:
            check_outage(TwoTier(store, local=0.25, failure_mode="local", breaker=breaker), down)
        finally:
            store.close()
        return
    astore = AsyncRedisStore.from_url(server.url, clock=clock, timeout=0.05)
    tiers = AsyncTwoTier(astore, local=0.25, failure_mode="local", breaker=breaker)
    check_async(check_outage, tiers, down)
