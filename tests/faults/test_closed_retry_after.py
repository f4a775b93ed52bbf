"""The ``closed`` failure mode's denial says when to try again, with or without a breaker.

A ``Limiter(store, failure_mode="closed")`` given no breaker denied with
``retry_after`` 0.0 while ``TwoTier`` (a breaker of its own) said 1.0: a 429 or 503
built from it read ``Retry-After: 0`` (retry at once, into the same outage), and
``acquire`` waited 0 s between attempts on the failing store. It is now a default
breaker's cool-down, 1 s, which is also what the middlewares' 503 sends.
"""

from __future__ import annotations

import pytest

from ratewarden import CircuitBreaker, Limiter, Rate, TwoTier
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import free_port

RATE = Rate.parse("10/minute")


@pytest.fixture
def down() -> RedisStore:
    """A Redis store whose server is not there: every call is StorageUnavailableError."""
    return RedisStore.from_url(f"redis://127.0.0.1:{free_port()}", clock=ManualClock())


def test_a_limiter_without_a_breaker_denies_for_a_default_cool_down(down: RedisStore) -> None:
    decision = Limiter(down, failure_mode="closed").hit("k", RATE)
    assert not decision.allowed and decision.degraded == "closed"
    assert decision.retry_after == decision.reset_after == CircuitBreaker().cooldown == 1.0


def test_the_same_answer_as_two_tier_with_its_own_breaker(down: RedisStore) -> None:
    plain = Limiter(down, failure_mode="closed").hit("k", RATE)
    tiered = TwoTier(down, failure_mode="closed").hit("k", RATE)
    assert (plain.retry_after, plain.reset_after) == (tiered.retry_after, tiered.reset_after)


def test_a_breaker_still_says_when_its_probe_comes(down: RedisStore) -> None:
    breaker = CircuitBreaker(failures=1, cooldown=7.0, clock=down.clock)
    decision = Limiter(down, failure_mode="closed", breaker=breaker).hit("k", RATE)
    assert decision.retry_after == 7.0


@pytest.mark.timeout(20)
def test_acquire_waits_between_attempts_instead_of_spinning(down: RedisStore) -> None:
    """``acquire`` waits each denial's retry_after on the store's clock: 1 s apart now, so a
    2.5 s timeout gives up after three attempts (with 0 s it never gave up)."""
    clock = down.clock
    assert isinstance(clock, ManualClock)
    started = clock.now_us()
    decision = Limiter(down, failure_mode="closed").acquire("k", RATE, timeout=2.5)
    assert not decision.allowed
    assert clock.now_us() - started == 2_000_000
