"""Concurrency slots take a ``limit`` and ``slots`` of at most 2**52 and a lease ``ttl`` of at
most 365 days; past them a ConfigurationError names the argument and the ceiling, before any
store is asked. Within them every store (memory, a real redis-server and a 3-primary Cluster,
sync and async) answers alike. Past 2**53 Redis used to disagree with memory (a remaining of
-2**63, an over-admission, a reset_after of -9.2e12 s, a StorageError calling itself a bug).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.checks import MAX_LEASE_SECONDS, MAX_SLOTS
from ratewarden.limiter import Lease
from ratewarden.middleware.concurrency import ConcurrencyMiddleware
from ratewarden.testing import ManualClock
from tests._stores import STORES, Closers, close_all, make_store

START = 1_699_999_980
YEAR = 365 * 86_400


async def _call(value: Any) -> Any:
    return await value if not isinstance(value, Lease | bool) else value


@pytest.fixture(params=STORES)
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A limiter of the parametrized store and flavour on a ManualClock."""
    closers: Closers = []
    store = make_store(request, request.param, ManualClock(START), closers)
    sync = request.param.split("-")[1] == "sync"
    yield Limiter(store) if sync else AsyncLimiter(store)
    await close_all(closers)


def test_the_ceilings_are_2_to_the_52_slots_and_a_year() -> None:
    """The documented ceilings."""
    assert (MAX_SLOTS, MAX_LEASE_SECONDS) == (2**52, YEAR)


@pytest.mark.parametrize(
    ("limit", "kwargs", "words"),
    [
        (2**53 + 1, {}, "concurrency limit 9,007,199,254,740,993 is too large: at most 4,503,"),
        (2**63, {}, "concurrency limit 9,223,372,036,854,775,808 is too large"),
        (2**52 + 1, {}, "concurrency limit 4,503,599,627,370,497 is too large"),
        (10, {"slots": 2**52 + 1}, "concurrency slots 4,503,599,627,370,497 is too large"),
        (1, {"ttl": 1e13}, "lease ttl 10000000000000.0 is too long: at most 31,536,000 seconds"),
        (1, {"ttl": 1e15}, "lease ttl 1000000000000000.0 is too long"),
        (1, {"ttl": YEAR + 0.5}, "lease ttl 31536000.5 is too long"),
    ],
)
async def test_past_a_ceiling_acquire_slot_is_refused_and_takes_nothing(
    limiter: Any, limit: int, kwargs: dict[str, Any], words: str
) -> None:
    """The method, the argument, its value and the ceiling; a slot of limit 1 is still free
    after."""
    called = f"{type(limiter).__name__}.acquire_slot: "
    with pytest.raises(ConfigurationError, match=f"^{re.escape(called + words)}"):
        await _call(limiter.acquire_slot("s", limit, **kwargs))
    assert (await _call(limiter.acquire_slot("s", 1))).allowed


async def test_at_the_ceilings_every_store_counts_exactly(limiter: Any) -> None:
    """Limit 2**52: two leases of 2**51 fill it (remaining 0), one slot more is refused, and
    releasing one frees exactly 2**51. A lease of 365 days resets after exactly that."""
    half = 2**51
    first = await _call(limiter.acquire_slot("s", MAX_SLOTS, slots=half, ttl=10))
    assert first.allowed and first.decision.remaining == half
    second = await _call(limiter.acquire_slot("s", MAX_SLOTS, slots=half, ttl=10))
    assert second.allowed and second.decision.remaining == 0
    refused = await _call(limiter.acquire_slot("s", MAX_SLOTS, ttl=10))
    assert not refused.allowed and refused.decision.retry_after == 10.0
    assert await _call(limiter.release_slot(first))
    after = await _call(limiter.acquire_slot("s", MAX_SLOTS, ttl=10))
    assert after.allowed and after.decision.remaining == half - 1
    year = await _call(limiter.acquire_slot("y", 1, ttl=YEAR))
    assert year.allowed and year.decision.reset_after == float(YEAR)
    held = await _call(limiter.acquire_slot("y", 1, ttl=YEAR))
    assert not held.allowed and held.decision.retry_after == float(YEAR)


async def test_renew_slot_past_a_year_is_refused_and_keeps_the_lease(limiter: Any) -> None:
    """renew_slot(ttl=) has the same ceiling; the lease stays as it was."""
    lease = await _call(limiter.acquire_slot("s", 1, ttl=10))
    words = f"{type(limiter).__name__}.renew_slot: lease ttl 10000000000000.0 is too long"
    with pytest.raises(ConfigurationError, match=f"^{re.escape(words)}"):
        await _call(limiter.renew_slot(lease, ttl=1e13))
    assert not (await _call(limiter.acquire_slot("s", 1, ttl=10))).allowed
    assert await _call(limiter.renew_slot(lease, ttl=YEAR))


def test_the_slot_context_manager_refuses_as_acquire_slot_does() -> None:
    """``with limiter.slot(...)`` goes through acquire_slot: the same refusal."""
    limiter = Limiter(MemoryStore())
    with (
        pytest.raises(ConfigurationError, match=r"concurrency limit .* is too large"),
        limiter.slot("s", 2**60),
    ):
        pass


@pytest.mark.parametrize(
    ("limit", "slots", "ttl_us", "words"),
    [
        (2**53, 1, 10, "concurrency limit 9,007,199,254,740,992 is too large"),
        (10, 2**53, 10, "concurrency slots 9,007,199,254,740,992 is too large"),
        (1, 1, 2**63, "concurrency ttl 9,223,372,036,854,775,808 microseconds is too long"),
    ],
)
def test_a_store_called_directly_refuses_the_same(
    limit: int, slots: int, ttl_us: int, words: str
) -> None:
    """The stores' own check (what every limiter call reaches) has the same ceilings."""
    with pytest.raises(ConfigurationError, match=re.escape(words)):
        MemoryStore().acquire_slot("s", limit, "lease", slots, ttl_us)


def test_the_concurrency_middleware_refuses_a_limit_past_the_ceiling_when_built() -> None:
    """Not one ConfigurationError per request at acquire: the middleware refuses it when built."""
    with pytest.raises(ConfigurationError, match=r"concurrency middleware limit .* at most"):
        ConcurrencyMiddleware(
            lambda *args: None, limiter=AsyncLimiter(AsyncMemoryStore()), limit=2**52 + 1
        )
