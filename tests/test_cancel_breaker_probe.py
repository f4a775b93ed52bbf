"""A cancelled store call that was the half-open breaker's probe gives the probe's place back.

``hit`` and ``hit_all`` did (``abandon()``); the slot calls (``acquire_slot``,
``release_slot``, ``renew_slot``) and ``apply`` (token budgets, fair shares, RLQS rounds)
did not: the breaker stayed half open with its one probe "in flight" for ever, so every
later call on the limiter was refused (``CircuitOpenError``, or the failure mode) while the
store was healthy, and a cancelled acquire's slot could not even be given back.

Redis holds the probe's script with ``CLIENT PAUSE ... WRITE`` until it is cancelled, so
every step is ordered without sleeping; the breaker runs on a ManualClock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from ratewarden import AsyncLimiter
from ratewarden.limiter import CircuitBreaker
from ratewarden.limiter._slots import Lease
from ratewarden.storage.quota_shares import quota_shares_op
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.budgets.test_slot_cancel import cancelled_while_paused

pytestmark = pytest.mark.redis

Probe = Callable[[AsyncLimiter, Lease], Coroutine[Any, Any, object]]

PROBES: dict[str, Probe] = {
    "acquire_slot": lambda limiter, held: limiter.acquire_slot("gpu", 3, ttl=30),
    "release_slot": lambda limiter, held: limiter.release_slot(held),
    "renew_slot": lambda limiter, held: limiter.renew_slot(held),
    "apply": lambda limiter, held: limiter.run(
        limiter.apply_flow(quota_shares_op("rw", "b1", 100, 10, 1_000_000, [("m1", 1000)]))
    ),
}


@pytest.mark.parametrize("call", sorted(PROBES))
async def test_a_cancelled_probe_lets_the_next_call_probe_again(
    redis_server: RedisServer, call: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The breaker opened, its cool-down passed, and the next call (the probe) cancelled
    while Redis holds it: the breaker lets a call through again, which closes it, and
    nothing was left undone (before: half open with a probe in flight for ever, every
    later call refused, and a cancelled acquire's slot held by nobody)."""
    admin = redis_server.client()
    admin.flushall()
    clock = ManualClock()
    breaker = CircuitBreaker(failures=1, cooldown=1.0, clock=clock)
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    limiter = AsyncLimiter(store, breaker=breaker)
    try:
        held = await limiter.acquire_slot("gpu", 3, ttl=30)  # warm, and a lease to renew
        breaker.failure()
        assert breaker.state == "open"
        clock.advance(1.0)
        with caplog.at_level(logging.WARNING, logger="ratewarden"):
            await cancelled_while_paused(admin, PROBES[call](limiter, held))
        assert not [r.getMessage() for r in caplog.records if "could not undo" in r.getMessage()]
        assert breaker.state in ("closed", "half_open")
        assert (await limiter.acquire_slot("other", 1, ttl=1)).allowed  # the next probe
        assert breaker.state == "closed"
        # Only the warm lease is held (a cancelled acquire gave its slot back), or none once
        # the cancelled release ran.
        free = 3 if call == "release_slot" else 2
        assert (await limiter.acquire_slot("gpu", 3, slots=free, ttl=1)).allowed
    finally:
        await store.aclose()
