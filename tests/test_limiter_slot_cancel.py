"""A limiter's own acquire_slot, cancelled or interrupted while the store decides, gives the
slot back (the ``held_slot`` helpers and the shedders already did; ConcurrencyMiddleware and
``limiter.slot`` call this one). The blocking acquire interrupted by a signal is a case of
tests/budgets/test_slot_cancel.py's interrupted-acquire test. Redis holds the script with
``CLIENT PAUSE ... WRITE``, so every step is ordered without sleeping for it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter
from ratewarden.storage.redis import AsyncRedisStore
from tests._servers import RedisServer
from tests.budgets.test_slot_cancel import cancelled_while_paused

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
