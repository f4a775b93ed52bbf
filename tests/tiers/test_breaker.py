"""CircuitBreaker: the state machine, driven by a ManualClock (no sleeps)."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.metrics import Metrics
from ratewarden.testing import ManualClock
from ratewarden.tiers import CircuitBreaker


class Transitions(Metrics):
    """Records every breaker transition it is told about."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def breaker(self, *, name: str, state: str) -> None:
        self.seen.append((name, state))


def make(clock: ManualClock, **options: object) -> tuple[CircuitBreaker, Transitions]:
    metrics = Transitions()
    breaker = CircuitBreaker(clock=clock, metrics=metrics, name="redis", **options)  # type: ignore[arg-type]
    return breaker, metrics


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        assert breaker.allow()
        breaker.failure()


def probing() -> tuple[CircuitBreaker, Transitions, ManualClock]:
    """A breaker opened by one failure, its 1 s cool-down over, whose probe was let through."""
    clock = ManualClock()
    breaker, metrics = make(clock, failures=1, cooldown=1.0)
    fail(breaker, 1)
    clock.advance(1.0)
    assert breaker.allow()
    return breaker, metrics, clock


def test_opens_after_n_consecutive_failures_and_then_refuses_calls() -> None:
    """Five failures in a row open it; from then on allow() is False without any call."""
    breaker, metrics = make(ManualClock(), failures=5, failure_ratio=None)
    fail(breaker, 4)
    assert breaker.state == "closed"
    fail(breaker, 1)
    assert breaker.state == "open"
    assert [breaker.allow() for _ in range(100)] == [False] * 100
    assert metrics.seen == [("redis", "open")]


def test_a_success_resets_the_consecutive_count() -> None:
    """Four failures, a success, four failures: never five in a row, so it stays closed."""
    breaker, _ = make(ManualClock(), failures=5, failure_ratio=None)
    fail(breaker, 4)
    assert breaker.allow()
    breaker.success()
    fail(breaker, 4)
    assert breaker.state == "closed"


def test_opens_on_the_failure_ratio_over_the_window() -> None:
    """Alternating failures never make 3 in a row, but half of 10 calls failing opens it."""
    breaker, _ = make(ManualClock(), failures=3, failure_ratio=0.5, window=10, min_calls=10)
    for i in range(9):
        assert breaker.allow()
        breaker.failure() if i % 2 == 0 else breaker.success()
    assert breaker.state == "closed"  # 9 calls: below min_calls, whatever the ratio
    assert breaker.allow()
    breaker.success()  # 10 calls, 5 failed: ratio 0.5 reached on the next failure check
    assert breaker.state == "closed"
    assert breaker.allow()
    breaker.failure()  # window now holds the last 10: 5 failures
    assert breaker.state == "open"


def test_half_open_after_the_cooldown_lets_exactly_one_probe_through() -> None:
    """Open for `cooldown` seconds; then one caller probes and the others are still refused."""
    clock = ManualClock()
    breaker, metrics = make(clock, failures=1, cooldown=2.0)
    fail(breaker, 1)
    clock.advance(1.999)
    assert not breaker.allow()
    assert breaker.retry_in() == 0.001
    clock.advance(0.001)
    assert breaker.allow()
    assert breaker.state == "half_open"
    assert not breaker.allow()
    assert metrics.seen == [("redis", "open"), ("redis", "half_open")]


def test_a_successful_probe_closes_it() -> None:
    """The probe's answer closes the breaker and calls flow again."""
    breaker, metrics, _ = probing()
    breaker.success()
    assert breaker.state == "closed"
    assert all(breaker.allow() for _ in range(10))
    assert metrics.seen[-1] == ("redis", "closed")


def test_a_failed_probe_opens_it_again_for_a_whole_cooldown() -> None:
    """A probe that fails restarts the cool-down from the failure."""
    breaker, metrics, clock = probing()
    clock.advance(0.5)
    breaker.failure()
    assert breaker.state == "open"
    clock.advance(0.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()
    assert [state for _, state in metrics.seen] == ["open", "half_open", "open", "half_open"]


def test_an_abandoned_probe_gives_its_place_back() -> None:
    """A probe cancelled before it reports lets the next caller probe instead."""
    breaker, _, _ = probing()
    assert not breaker.allow()
    breaker.abandon()
    assert breaker.allow()
    assert breaker.state == "half_open"


def test_late_failures_while_open_do_not_extend_the_cooldown() -> None:
    """Calls let through before it opened may fail afterwards; the cool-down is not pushed back."""
    clock = ManualClock()
    breaker, _ = make(clock, failures=1, cooldown=1.0)
    assert breaker.allow() and breaker.allow()
    breaker.failure()
    clock.advance(0.9)
    breaker.failure()  # the second call, reporting late
    clock.advance(0.1)
    assert breaker.allow()


def test_several_probes_when_asked() -> None:
    """probes=3 lets three callers through while half open, not a fourth."""
    clock = ManualClock()
    breaker, _ = make(clock, failures=1, cooldown=1.0, probes=3)
    fail(breaker, 1)
    clock.advance(1.0)
    assert [breaker.allow() for _ in range(4)] == [True, True, True, False]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failures": 0}, "failures 0"),
        ({"failures": True}, "failures True"),
        ({"failure_ratio": 0}, "failure_ratio 0"),
        ({"failure_ratio": 1.5}, "failure_ratio 1.5"),
        ({"window": 0}, "window 0"),
        ({"min_calls": 30, "window": 20}, "min_calls 30 is above window 20"),
        ({"cooldown": 0}, "cooldown 0"),
        ({"cooldown": float("inf")}, "cooldown inf"),
        ({"cooldown": "1s"}, "cooldown '1s'"),
        ({"probes": 0}, "probes 0"),
        ({"name": ""}, "name ''"),
    ],
)
def test_bad_settings_are_configuration_errors(options: dict[str, object], message: str) -> None:
    """Each bad setting names itself and its value."""
    with pytest.raises(ConfigurationError, match=message):
        CircuitBreaker(**options)  # type: ignore[arg-type]
