# mypy: disable-error-code="arg-type"
# (what is not a Lease is what these tests give)
"""``release_slot`` and ``renew_slot`` take the Lease ``acquire_slot`` returned; anything else
(its lease id, None, a number, a dict) is a ConfigurationError naming the method, raised before
the store is asked, on both twins. It was an AttributeError from inside the flow
(``'str' object has no attribute 'allowed'``)."""

from __future__ import annotations

import pytest
import redis

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.storage.redis import RedisStore
from tests._servers import STORE_TIMEOUT

NOT_LEASES = ["lease-id", None, 5, {"key": "gpu"}]


@pytest.mark.parametrize("given", NOT_LEASES, ids=repr)
@pytest.mark.parametrize("method", ["release_slot", "renew_slot"])
def test_what_is_not_a_lease_is_refused_naming_the_method(method: str, given: object) -> None:
    """The method, the value and its type, and what to pass instead."""
    limiter = Limiter(MemoryStore())
    with pytest.raises(ConfigurationError) as refused:
        getattr(limiter, method)(given)
    message = str(refused.value)
    assert message.startswith(f"{method}: {given!r} ({type(given).__name__}) is not a Lease")
    assert message.endswith("pass the Lease that acquire_slot returned")


@pytest.mark.parametrize("method", ["release_slot", "renew_slot"])
async def test_the_asyncio_twin_refuses_it_the_same_way(method: str) -> None:
    """AsyncLimiter runs the same flow: the same error, at the await."""
    limiter = AsyncLimiter(AsyncMemoryStore())
    with pytest.raises(ConfigurationError, match=f"^{method}: 'lease-id' \\(str\\) is not a"):
        await getattr(limiter, method)("lease-id")


def test_a_refused_lease_id_leaves_the_slot_held_on_a_real_redis(
    redis_client: redis.Redis,
) -> None:
    """Given the lease's id, not the lease, nothing reaches the store: the slot stays held
    until the Lease itself is released."""
    limiter = Limiter(RedisStore(redis_client, timeout=STORE_TIMEOUT))
    lease = limiter.acquire_slot("gpu", 1)
    assert lease.allowed
    for method in ("release_slot", "renew_slot"):
        with pytest.raises(ConfigurationError):
            getattr(limiter, method)(lease.lease_id)
    assert not limiter.acquire_slot("gpu", 1).allowed
    assert limiter.release_slot(lease)
    assert limiter.acquire_slot("gpu", 1).allowed
