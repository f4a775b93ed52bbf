"""A failure mode handed to a limiter per call, reported by the caller's ``FailureReport``.

Against a real redis-server that is not listening (a free port) or stopped: a
plain limiter (every part off: one store call per hit) given ``failure_mode=``
and ``on_failure=`` answers a failed store call with the failure mode's degraded
Decision and reports it through the hook, in both drivers; without a failure
mode the store's error is raised as before, and a bad failure mode is refused
even when the store is healthy.
"""

from __future__ import annotations

import logging

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, Rate
from ratewarden.errors import CircuitOpenError, ConfigurationError, StorageUnavailableError
from ratewarden.limiter import FailureReport, failure_reason
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._metrics import Recorded
from tests._servers import HOST, STORE_TIMEOUT, free_port

pytestmark = pytest.mark.timeout(30)

RATE = Rate.parse("5/minute")


def _dead_url() -> str:
    return f"redis://{HOST}:{free_port()}/0"


@pytest.mark.parametrize(("failure", "allowed"), [("open", True), ("closed", False)])
def test_a_plain_limiter_answers_a_dead_store_by_the_calls_failure_mode(
    failure: str, allowed: bool
) -> None:
    """``hit(..., failure_mode=, on_failure=)``: its Decision, the hook told the error."""
    store = RedisStore.from_url(_dead_url(), timeout=STORE_TIMEOUT)
    limiter = Limiter(store)
    assert limiter.plain
    told: list[Exception] = []
    try:
        decision = limiter.hit("k", RATE, failure_mode=failure, on_failure=told.append)
        with pytest.raises(StorageUnavailableError):
            limiter.hit("k", RATE)  # no failure mode: raised, as ever
    finally:
        store.close()
    assert (decision.allowed, decision.degraded) == (allowed, failure)
    assert [type(error) for error in told] == [StorageUnavailableError]


async def test_the_asyncio_limiter_answers_the_same_way() -> None:
    """``AsyncLimiter.hit`` with a per-call failure mode over a dead store: the same answer."""
    store = AsyncRedisStore.from_url(_dead_url(), timeout=STORE_TIMEOUT)
    told: list[Exception] = []
    try:
        decision = await AsyncLimiter(store).hit(
            "k", RATE, 2, failure_mode="closed", on_failure=told.append
        )
    finally:
        await store.aclose()
    assert (decision.allowed, decision.degraded, decision.cost) == (False, "closed", 2)
    assert len(told) == 1


def test_a_bad_failure_mode_is_refused_even_when_the_store_answers() -> None:
    """The plain shortcut still checks the failure mode: a typo never passes silently."""
    limiter = Limiter(clock=ManualClock())
    with pytest.raises(ConfigurationError, match="failure_mode 'opne' must be one of"):
        limiter.hit("k", RATE, failure_mode="opne")
    hit_now = AsyncLimiter(AsyncMemoryStore(clock=ManualClock())).hit_now
    with pytest.raises(ConfigurationError, match="failure_mode 'opne' must be one of"):
        hit_now("k", RATE, failure_mode="opne")
    assert limiter.hit("k", RATE, failure_mode="open").degraded == ""  # healthy: the store decides


def test_a_failure_report_counts_and_logs_once_per_reason_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """500 failures: 500 counted; one line, then one more an interval later saying how many
    were held back; the breaker's refusal is its own reason (``breaker_open``)."""
    clock, metrics = ManualClock(), Recorded()
    report = FailureReport("open", name="api", clock=clock, metrics=metrics, logger="rw.test")
    with caplog.at_level(logging.WARNING, logger="rw.test"):
        for _ in range(500):
            report(StorageUnavailableError("down"))
        report(CircuitOpenError("open"))
        clock.advance(60)
        report(StorageUnavailableError("down"))
    lines = [r.getMessage() for r in caplog.records if r.name == "rw.test"]
    assert len(lines) == 3
    assert "'api'" in lines[0] and "failure mode 'open'" in lines[0] and "down" in lines[0]
    assert "breaker_open" in lines[1]
    assert "(499 similar lines suppressed)" in lines[2]
    assert metrics.degraded_calls[0] == ("api", "open", "StorageUnavailableError")
    assert len(metrics.degraded_calls) == 502
    assert failure_reason(CircuitOpenError("x")) == "breaker_open"


def test_a_failure_report_checks_its_settings() -> None:
    """A metrics object that is not a Metrics, or an empty name: refused, naming it."""
    with pytest.raises(ConfigurationError, match="must be a Metrics"):
        FailureReport("open", name="api", clock=ManualClock(), metrics=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty string"):
        FailureReport("open", name="", clock=ManualClock())
