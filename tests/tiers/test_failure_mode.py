"""Failure mode and breaker inside the flow, over a store switched off by the test (pure logic).

The same behaviour against a real redis-server that is stopped mid-test is in
test_outage_redis.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from ratewarden import Decision, Rate
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.testing import ManualClock
from ratewarden.tiers import FAILURE_MODES, CircuitBreaker, TwoTier
from tests.tiers._helpers import Recorder, SwitchableStore

RATE = Rate.parse("5/minute")


def setup(mode: str, **options: object) -> tuple[TwoTier, SwitchableStore, ManualClock, Recorder]:
    clock = ManualClock()
    store = SwitchableStore(clock=clock)
    metrics = Recorder()
    breaker = CircuitBreaker(failures=3, cooldown=10.0, clock=clock, metrics=metrics)
    tiers = TwoTier(
        store,
        failure_mode=mode,
        breaker=breaker,
        metrics=metrics,
        name="rule-a",
        **options,  # type: ignore[arg-type]
    )
    return tiers, store, clock, metrics


def test_open_allows_and_says_so() -> None:
    """open: allowed, nothing counted, Decision.degraded == "open"."""
    tiers, store, _, metrics = setup("open")
    store.down = True
    decisions = [tiers.hit("k", RATE) for _ in range(20)]
    assert all(d.allowed and d.degraded == "open" for d in decisions)
    assert decisions[0].remaining == 5 and decisions[0].limit == 5
    assert metrics.degraded_calls[0] == ("rule-a", "open", "StorageUnavailableError")
    assert len(metrics.degraded_calls) == 20


def test_closed_denies_with_a_retry_time_from_the_breaker() -> None:
    """closed: denied; once the breaker is open, retry_after is the time to its next probe."""
    tiers, store, clock, _ = setup("closed")
    store.down = True
    first = tiers.hit("k", RATE)
    assert not first.allowed and first.degraded == "closed"
    assert first.retry_after == 10.0  # breaker still closed: a whole cool-down
    tiers.hit("k", RATE)
    tiers.hit("k", RATE)  # third failure opens the breaker
    clock.advance(4.0)
    later = tiers.hit("k", RATE)
    assert not later.allowed and later.retry_after == 6.0


def test_local_falls_back_to_an_in_process_bucket_of_the_global_rates() -> None:
    """local without a local tier: this process alone may admit the global rate, then denies."""
    tiers, store, _, _ = setup("local")
    store.down = True
    decisions = [tiers.hit("k", RATE) for _ in range(7)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert {d.degraded for d in decisions} == {"local"}
    assert decisions[-1].retry_after == 12.0


def test_local_with_a_local_tier_decides_on_that_bucket() -> None:
    """local=0.4 of 5/min is 2 per process: two allowed in the outage, then the bucket denies."""
    tiers, store, _, _ = setup("local", local=0.4)
    store.down = True
    decisions = [tiers.hit("k", RATE) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert [d.degraded for d in decisions] == ["local", "local", "", ""]  # the bucket itself denies


def test_a_rule_may_override_the_failure_mode_per_call() -> None:
    """failure_mode="closed" on the call wins over the limiter's "open"."""
    tiers, store, _, _ = setup("open")
    store.down = True
    assert tiers.hit("login", RATE, failure_mode="closed").degraded == "closed"
    assert tiers.hit("search", RATE).degraded == "open"


def test_the_breaker_stops_store_calls_and_a_probe_closes_it() -> None:
    """Three failures open it; 100 more hits make no store call; after the cool-down one probe
    finds the store back, closes the breaker, and decisions come from the store again."""
    tiers, store, clock, metrics = setup("open")
    store.down = True
    for _ in range(103):
        tiers.hit("k", RATE)
    assert store.calls == 3
    assert tiers.breaker.state == "open"
    assert metrics.degraded_calls[-1][2] == "breaker_open"
    store.down = False
    clock.advance(10.0)
    decision = tiers.hit("k", RATE)
    assert decision.degraded == "" and decision.remaining == 4
    assert tiers.breaker.state == "closed"
    assert [state for _, state in metrics.breakers] == ["open", "half_open", "closed"]


def test_degraded_decisions_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    """An outage seen by 500 requests writes one line per reason per minute, not 500."""
    tiers, store, clock, _ = setup("open")
    store.down = True
    with caplog.at_level(logging.WARNING, logger="ratewarden.tiers"):
        for _ in range(500):
            tiers.hit("k", RATE)
        clock.advance(61.0)
        tiers.hit("k", RATE)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines  # StorageUnavailableError, breaker_open, then a minute later
    assert "similar lines suppressed" in lines[-1]
    # On the logger two-tiers.md names, with the error's own words (what failed, and where).
    assert {r.name for r in caplog.records} == {"ratewarden.limiter"}
    assert "(StorageUnavailableError: store switched off by the test)" in lines[0], lines[0]
    assert "(breaker_open: circuit breaker open" in lines[1], lines[1]


def test_leased_units_are_spent_through_an_outage_without_degrading() -> None:
    """Units already bought were counted fleet-wide: spending them needs no store."""
    tiers, store, _, _ = setup("closed", lease=3)
    assert tiers.hit("k", RATE).allowed
    store.down = True
    held = [tiers.hit("k", RATE) for _ in range(2)]
    assert all(d.allowed and d.degraded == "" for d in held)
    assert tiers.hit("k", RATE).degraded == "closed"


def test_a_negatively_cached_key_stays_denied_through_an_outage() -> None:
    """A known denial is still a denial: no store call and no degraded answer."""
    tiers, store, _, _ = setup("open")
    for _ in range(6):
        tiers.hit("k", RATE)
    store.down = True
    calls = store.calls
    decision = tiers.hit("k", RATE)
    assert not decision.allowed and decision.degraded == ""
    assert store.calls == calls


def test_peek_in_an_outage_follows_the_failure_mode() -> None:
    """peek() asks the store; when it cannot, the failure mode answers."""
    tiers, store, _, _ = setup("closed")
    store.down = True
    assert tiers.peek("k", RATE).degraded == "closed"


def test_reset_in_an_outage_raises_but_forgets_the_local_state() -> None:
    """reset() is not a decision: a store outage is raised to the caller."""
    tiers, store, _, _ = setup("open")
    for _ in range(6):
        tiers.hit("k", RATE)
    assert tiers.negative is not None and len(tiers.negative) == 1
    store.down = True
    with pytest.raises(StorageUnavailableError):
        tiers.reset("k", RATE)
    assert len(tiers.negative) == 0


@pytest.mark.parametrize("bad", ["fail-open", "", None, 1])
def test_an_unknown_failure_mode_is_a_configuration_error(bad: object) -> None:
    """Only open, closed and local exist; the message names the keyword and lists them."""
    with pytest.raises(
        ConfigurationError, match=r"failure_mode .* must be one of open, closed, local"
    ):
        TwoTier(SwitchableStore(), failure_mode=bad)  # type: ignore[arg-type]
    tiers = TwoTier(SwitchableStore())
    if bad is not None:
        with pytest.raises(ConfigurationError, match="open, closed, local"):
            tiers.hit("k", RATE, failure_mode=bad)  # type: ignore[arg-type]


def test_failure_modes_are_one_tuple_everywhere() -> None:
    """The tiers, the rule files and the core name the same tuple, the core's; the budget
    rules and the middleware take its open/closed part."""
    from ratewarden import limiter
    from ratewarden.middleware._failure import MIDDLEWARE_FAILURE_MODES
    from ratewarden.server.config import FAILURE_MODES as SERVER_MODES
    from ratewarden.server.config.budget import BUDGET_FAILURE_MODES

    assert FAILURE_MODES is SERVER_MODES is limiter.FAILURE_MODES
    assert FAILURE_MODES == ("open", "closed", "local")
    assert BUDGET_FAILURE_MODES == MIDDLEWARE_FAILURE_MODES == ("open", "closed")


class BrokenStore(SwitchableStore):
    """Raises a bug (not a storage failure) while ``broken``."""

    broken = False

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        if self.broken:
            raise RuntimeError("a bug in the store")
        return super().hit(algorithm, key, rates, cost)


def test_a_bug_in_the_store_is_raised_not_hidden_and_leaves_no_trace() -> None:
    """A non-storage exception propagates; the breaker's probe place and the lease buyer's
    place are given back, so the next call works normally."""
    clock = ManualClock()
    store = BrokenStore(clock=clock)
    breaker = CircuitBreaker(failures=1, cooldown=1.0, clock=clock)
    tiers = TwoTier(store, lease=3, breaker=breaker)
    store.down = True
    tiers.hit("k", RATE)  # one failure opens the breaker
    store.down, store.broken = False, True
    clock.advance(1.0)
    with pytest.raises(RuntimeError, match="a bug in the store"):
        tiers.hit("k", RATE)  # the probe meets the bug
    assert breaker.state == "half_open"
    store.broken = False
    decision = tiers.hit("k", RATE)
    assert decision.allowed and decision.degraded == ""
    assert breaker.state == "closed"
    assert tiers.counts.leases_bought == 1  # it could buy: the failed buyer gave its place back
