"""The limiter's per-call options for adapters that decide through it (the Envoy service first).

``hit_flow(via=...)`` asks another callable in place of the store's ``hit``;
``on_failure`` reports a failure the policy answered, in the caller's own words;
``failure_errors`` widens what a policy answers; ``cached_denial`` tells an
adapter beforehand what the negative cache would answer; ``local_all`` is the
``local`` policy for a whole batch; ``hit_all_flow`` is timed like ``hit``.
All on the memory store and a ManualClock.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, Decision, Limiter, MemoryStore, Rate
from ratewarden.errors import StorageUnavailableError
from ratewarden.limiter import CircuitBreaker
from ratewarden.metrics import Metrics
from ratewarden.testing import ManualClock

RATE = Rate.parse("2/minute")


class Timings(Metrics):
    """Keeps every store latency the limiter reports."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def store_latency(self, *, seconds: float) -> None:
        self.seconds.append(seconds)


def _limiter(**options: Any) -> tuple[Limiter, ManualClock]:
    clock = ManualClock()
    return Limiter(MemoryStore(clock=clock), "fixed_window", **options), clock


def test_via_is_asked_in_place_of_the_store_with_the_store_hit_arguments() -> None:
    """The callable gets (algorithm, key, rates, cost); its Decision is the answer, and the
    store holds no counter for the key."""
    limiter, _ = _limiter()
    asked: list[tuple[Any, ...]] = []
    other = MemoryStore(clock=limiter.clock)

    def via(algorithm: str, key: str, rates: Any, cost: int) -> Decision:
        asked.append((algorithm, key, rates, cost))
        return other.hit(algorithm, key, rates, cost)

    decision = limiter.run(limiter.hit_flow("k", RATE, 2, algorithm="gcra", via=via))
    assert asked == [("gcra", "k", RATE, 2)]
    assert decision.allowed and decision.remaining == 0
    assert limiter.peek("k", RATE).remaining == 2


async def test_via_is_awaited_under_the_async_limiter() -> None:
    """AsyncLimiter awaits the callable (a coroutine function there)."""
    clock = ManualClock()
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    other = AsyncMemoryStore(clock=clock)

    async def via(algorithm: str, key: str, rates: Any, cost: int) -> Decision:
        return await other.hit(algorithm, key, rates, cost)

    decision = await limiter.run(limiter.hit_flow("k", RATE, 3, via=via))
    assert not decision.allowed
    assert (await other.hit("gcra", "k", RATE, 0)).remaining == 2


def test_a_failing_via_goes_through_the_breaker_and_the_policy() -> None:
    """A via that raises a storage failure counts against the breaker; the policy answers."""
    breaker = CircuitBreaker(failures=2, failure_ratio=None, clock=ManualClock())
    limiter, _ = _limiter(breaker=breaker)
    calls = []

    def down(algorithm: str, key: str, rates: Any, cost: int) -> Decision:
        calls.append(key)
        raise StorageUnavailableError("budget store down")

    for _ in range(3):
        flow = limiter.hit_flow("k", RATE, failure_mode="closed", via=down)
        assert limiter.run(flow).degraded == "closed"
    assert breaker.state == "open"
    assert calls == ["k", "k"]  # the third was refused by the breaker, without a call


def _broken_store(clock: ManualClock, error: Exception) -> Any:
    class Broken(MemoryStore):
        def hit(self, *args: Any, **kwargs: Any) -> Decision:
            raise error

    return Broken(clock=clock)


def test_only_storage_failures_are_answered_unless_widened() -> None:
    """A bug in the store raises through a policy by default; with failure_errors widened the
    policy answers it too, and the breaker is told nothing (a bug says nothing of the store)."""
    clock = ManualClock()
    breaker = CircuitBreaker(failures=1, failure_ratio=None, clock=clock)
    limiter = Limiter(_broken_store(clock, RuntimeError("a bug")), breaker=breaker)
    with pytest.raises(RuntimeError, match="a bug"):
        limiter.run(limiter.hit_flow("k", RATE, failure_mode="open"))
    limiter.failure_errors = Exception
    decision = limiter.run(limiter.hit_flow("k", RATE, failure_mode="open"))
    assert decision.allowed and decision.degraded == "open"
    assert breaker.state == "closed"


def test_on_failure_reports_instead_of_the_limiters_own_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without on_failure the limiter logs the failure; with it, the hook is told the error
    and the limiter logs nothing."""
    clock = ManualClock()
    error = StorageUnavailableError("down")
    limiter = Limiter(_broken_store(clock, error))
    told: list[Exception] = []
    with caplog.at_level(logging.WARNING, logger="ratewarden"):
        limiter.run(limiter.hit_flow("k", RATE, failure_mode="open", on_failure=told.append))
        assert told == [error]
        assert caplog.records == []
        limiter.run(limiter.hit_flow("k", RATE, failure_mode="open"))
    assert [r.getMessage() for r in caplog.records] == [
        "ratewarden default: the store failed (StorageUnavailableError: down); "
        "failure mode 'open' answers"
    ]


def test_cached_denial_answers_beforehand_what_the_negative_cache_would() -> None:
    """After a denial: aged to now for at least the denied cost, None for less, none after the
    retry time, and never without a negative cache; no store call either way."""
    limiter, clock = _limiter(negative_cache=10)
    limiter.hit("k", RATE, 2)
    denial = limiter.hit("k", RATE, 1)
    assert not denial.allowed
    clock.advance(10)
    cached = limiter.cached_denial("k", RATE, 1, algorithm="fixed_window")
    assert cached is not None and not cached.allowed
    assert cached.retry_after == pytest.approx(denial.retry_after - 10)
    assert limiter.cached_denial("k", (RATE,), 5) is not None  # the limiter's own algorithm
    assert limiter.cached_denial("k", RATE, 0) is None  # a check of nothing is never denied
    assert limiter.cached_denial("other", RATE, 1) is None
    clock.advance(60)
    assert limiter.cached_denial("k", RATE, 1) is None
    plain, _ = _limiter()
    plain.hit("k", RATE, 3)
    assert plain.cached_denial("k", RATE, 3) is None


def test_local_all_decides_a_batch_together_in_process() -> None:
    """All or nothing on the in-process store, each answer marked local; the store untouched."""
    limiter, _ = _limiter()
    wide = Rate.parse("5/minute")
    first = limiter.local_all([("a", RATE, 2), ("b", wide, 2)], algorithm="gcra")
    assert [(d.allowed, d.degraded) for d in first] == [(True, "local"), (True, "local")]
    second = limiter.local_all([("a", RATE, 1), ("b", wide, 2)], algorithm="gcra")
    assert [d.allowed for d in second] == [False, True]
    assert limiter.local_all([("b", wide, 3)], algorithm="gcra")[0].allowed  # b kept its room
    assert limiter.peek("a", RATE).remaining == 2


class _Declining(MemoryStore):
    """A memory store whose hit_all declines (as a Cluster does for keys on several slots)."""

    def hit_all(self, algorithm: str, calls: Any) -> list[Decision] | None:
        return None


def test_hit_all_is_timed_once_and_a_declined_one_not_at_all() -> None:
    """One store_latency per joint step that reached the store; none for a declined one."""
    timings = Timings()
    limiter = Limiter(MemoryStore(clock=ManualClock()), metrics=timings)
    assert limiter.run(limiter.hit_all_flow([("a", RATE, 1), ("b", RATE, 1)])) is not None
    assert len(timings.seconds) == 1
    declining = Limiter(_Declining(clock=ManualClock()), metrics=timings)
    assert declining.run(declining.hit_all_flow([("a", RATE, 1)])) is None
    assert len(timings.seconds) == 1
