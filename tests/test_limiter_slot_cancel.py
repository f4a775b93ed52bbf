"""A limiter's own acquire_slot, cancelled or interrupted while the store decides, gives the
slot back (the ``held_slot`` helpers and the shedders already did; ConcurrencyMiddleware and
``limiter.slot`` call this one). Redis holds the script with ``CLIENT PAUSE ... WRITE``, so
every step is ordered without sleeping for it."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer
from tests.budgets.test_slot_cancel import Interrupted, _raise, cancelled_while_paused
from tests.faults._proxy import Fault, FaultProxy

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("how", ["acquire_slot", "slot"])
async def test_a_cancelled_acquire_gives_its_slot_back(redis_server: RedisServer, how: str) -> None:
    """Cancelled while its script waits in Redis: both of the 2 slots are free once the
    task has ended (before, one stayed held by nobody for the 30 s ttl)."""
    admin = redis_server.client()
    admin.flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    limiter = AsyncLimiter(store)

    async def in_slot() -> None:
        async with limiter.slot("gpu", 2, ttl=30):
            await asyncio.Event().wait()

    await limiter.release_slot(await limiter.acquire_slot("gpu", 2, ttl=1))  # warm
    work: Any = limiter.acquire_slot("gpu", 2, ttl=30) if how == "acquire_slot" else in_slot()
    await cancelled_while_paused(admin, work)
    assert (await limiter.acquire_slot("gpu", 2, slots=2, ttl=1)).allowed
    await store.aclose()


async def test_a_cancelled_renewal_under_the_callers_id_keeps_the_lease(
    redis_server: RedisServer,
) -> None:
    """An acquire under a lease id the caller gave (renewing a lease it holds) is not given
    back when cancelled: the caller still holds that lease."""
    admin = redis_server.client()
    admin.flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    limiter = AsyncLimiter(store)
    held = await limiter.acquire_slot("gpu", 2, ttl=30)
    assert held.allowed
    await cancelled_while_paused(
        admin, limiter.acquire_slot("gpu", 2, ttl=30, lease_id=held.lease_id)
    )
    assert not (await limiter.acquire_slot("gpu", 2, slots=2, ttl=1)).allowed
    assert await limiter.release_slot(held)
    await store.aclose()


def test_an_interrupted_blocking_acquire_gives_its_slot_back(redis_server: RedisServer) -> None:
    """A signal interrupts Limiter.acquire_slot after its script took the slot, while the
    reply is held back by a proxy: the slot is released by its id before the exception
    goes on (before, it stayed held for the 30 s ttl)."""
    redis_server.client().flushall()
    proxy = FaultProxy(redis_server.port)
    store = RedisStore.from_url(proxy.url, timeout=5.0)
    limiter = Limiter(store)
    probe_store = RedisStore.from_url(redis_server.url, timeout=5.0)
    probe = Limiter(probe_store)
    limiter.release_slot(limiter.acquire_slot("gpu", 2, ttl=1))  # connect, load the scripts
    proxy.set_fault(Fault.LATENCY, latency=0.3)

    def interrupt(main: int) -> None:
        deadline = time.monotonic() + 5.0
        while probe.acquire_slot("gpu", 2, slots=3, ttl=1).decision.remaining != 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        signal.pthread_kill(main, signal.SIGUSR1)

    before = signal.signal(signal.SIGUSR1, _raise)
    helper = threading.Thread(target=interrupt, args=(threading.get_ident(),))
    try:
        helper.start()
        with pytest.raises(Interrupted):
            limiter.acquire_slot("gpu", 2, ttl=30)
    finally:
        helper.join(timeout=10)
        signal.signal(signal.SIGUSR1, before)
    assert probe.acquire_slot("gpu", 2, slots=2, ttl=1).allowed
    store.close()
    probe_store.close()
    proxy.close()


def test_the_method_keeps_its_name_signature_and_argument_checks() -> None:
    """help() and inspect see acquire_slot as written; a misspelt keyword is the project's
    ConfigurationError naming the public method."""
    import inspect

    from ratewarden.errors import ConfigurationError

    for limiter in (Limiter, AsyncLimiter):
        assert limiter.acquire_slot.__name__ == "acquire_slot"
        assert "lease_id" in inspect.signature(limiter.acquire_slot).parameters
    with pytest.raises(ConfigurationError, match=r"Limiter\.acquire_slot.*ttl"):
        Limiter().acquire_slot("k", 2, tl=3)  # type: ignore[call-arg]
