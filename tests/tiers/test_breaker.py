"""CircuitBreaker: the state machine, driven by a ManualClock (no sleeps)."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import _breaker as breaker_module
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


def test_a_hold_longer_than_the_cooldown_keeps_it_open_that_long() -> None:
    """failure(hold=...) is the other side's Retry-After: the circuit that failure opens
    stays open for the longest hold since the last success (at most max_hold), never for
    less than the cool-down; a success forgets the holds; a failed probe's hold counts."""
    clock = ManualClock()
    breaker, _ = make(clock, failures=3, failure_ratio=None, cooldown=1.0, max_hold=60)
    for hold in (0.0, 5.0, 2.0):  # the longest of the run opens it
        assert breaker.allow()
        breaker.failure(hold=hold)
    assert breaker.retry_in() == 5.0
    clock.advance(4.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()  # the probe
    breaker.failure(hold=3600)  # fails, asking for an hour: max_hold
    assert breaker.retry_in() == 60.0
    clock.advance(60)
    assert breaker.allow()
    breaker.success()
    assert breaker.allow()
    breaker.failure(hold=9)
    breaker.success()  # the success forgets the 9 s
    fail(breaker, 3)
    assert breaker.retry_in() == 1.0


def test_a_late_failure_with_a_hold_extends_the_open_circuit() -> None:
    """A call let through before it opened that fails late asking for 10 s pushes the
    probe back to 10 s from then (without a hold it does not: above)."""
    clock = ManualClock()
    breaker, _ = make(clock, failures=1, cooldown=1.0)
    assert breaker.allow() and breaker.allow()
    breaker.failure()
    clock.advance(0.5)
    breaker.failure(hold=10)
    assert breaker.retry_in() == 10.0
    clock.advance(9.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()


@pytest.mark.parametrize("hold", [-1, float("nan"), float("inf"), "5", True])
def test_a_hold_that_is_not_seconds_is_refused(hold: object) -> None:
    breaker, _ = make(ManualClock(), failures=1)
    with pytest.raises(ConfigurationError, match="failure hold"):
        breaker.failure(hold=hold)  # type: ignore[arg-type]
    assert breaker.state == "closed"
    with pytest.raises(ConfigurationError, match="max_hold"):
        make(ManualClock(), max_hold=0)


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


def test_per_node_circuits_open_one_node_and_leave_the_others_closed() -> None:
    """With per_node, five failures on one node open that node's circuit only: calls to
    another node, and calls with no node, are still let through."""
    breaker, metrics = make(ManualClock(), failures=5, failure_ratio=None, per_node=True)
    for _ in range(5):
        assert breaker.allow("10.0.0.1:7000")
        breaker.failure("10.0.0.1:7000")
    assert not breaker.allow("10.0.0.1:7000")
    assert breaker.allow("10.0.0.2:7000")
    breaker.success("10.0.0.2:7000")
    assert breaker.allow()
    assert breaker.states() == {"": "closed", "10.0.0.1:7000": "open", "10.0.0.2:7000": "closed"}
    assert breaker.state == "closed"  # the circuit of calls with no node
    assert metrics.seen == [("redis@10.0.0.1:7000", "open")]


def test_a_node_circuit_has_the_breakers_settings_and_cooldown() -> None:
    """A node's circuit opens on the breaker's ratio too, and lets its probe through after
    the breaker's cool-down, on the breaker's clock."""
    clock = ManualClock()
    breaker, metrics = make(
        clock, failures=10, failure_ratio=0.5, window=4, min_calls=4, cooldown=2.0, per_node=True
    )
    for failed in (True, False, True, True):
        assert breaker.allow("a")
        breaker.failure("a") if failed else breaker.success("a")
    assert breaker.states()["a"] == "open"
    clock.advance(1.9)
    assert not breaker.allow("a")
    assert breaker.retry_in("a") == pytest.approx(0.1)
    clock.advance(0.1)
    assert breaker.allow("a")  # the probe
    assert not breaker.allow("a")  # one probe at a time
    breaker.success("a")
    assert breaker.states()["a"] == "closed"
    assert metrics.seen == [("redis@a", "open"), ("redis@a", "half_open"), ("redis@a", "closed")]


def test_without_per_node_every_node_shares_one_circuit() -> None:
    """The default: a node given to the methods is ignored, so failures on one node open
    the breaker for every node."""
    breaker, metrics = make(ManualClock(), failures=3, failure_ratio=None)
    for _ in range(3):
        assert breaker.allow("a")
        breaker.failure("a")
    assert not breaker.allow("b")
    assert not breaker.allow()
    assert breaker.states() == {"": "open"}
    assert metrics.seen == [("redis", "open")]


def test_recovered_closes_every_node_circuit() -> None:
    """A health ping that reached every node closes every open circuit at once."""
    breaker, _ = make(ManualClock(), failures=1, failure_ratio=None, per_node=True)
    for node in ("", "a", "b"):
        assert breaker.allow(node)
        breaker.failure(node)
    assert set(breaker.states().values()) == {"open"}
    breaker.recovered()
    assert set(breaker.states().values()) == {"closed"}
    assert all(breaker.allow(node) for node in ("", "a", "b"))


def test_abandon_on_a_node_gives_back_that_nodes_probe_place() -> None:
    """A probe to a node that ends without a verdict lets that node's next caller probe."""
    clock = ManualClock()
    breaker, _ = make(clock, failures=1, failure_ratio=None, cooldown=1.0, per_node=True)
    assert breaker.allow("a")
    breaker.failure("a")
    clock.advance(1.0)
    assert breaker.allow("a")
    assert not breaker.allow("a")
    breaker.abandon("a")
    assert breaker.allow("a")


def test_a_per_node_breaker_forgets_closed_circuits_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_NODES circuits (node names change with failovers) the closed ones are
    forgotten and the open ones kept: an open node stays open."""
    monkeypatch.setattr(breaker_module, "MAX_NODES", 3)
    breaker, _ = make(ManualClock(), failures=1, failure_ratio=None, per_node=True)
    assert breaker.allow("down")
    breaker.failure("down")
    for node in ("up-1", "up-2"):
        assert breaker.allow(node)
        breaker.success(node)
    assert breaker.allow("up-3")
    assert breaker.states() == {"": "closed", "down": "open", "up-3": "closed"}
    assert not breaker.allow("down")


def test_per_node_must_be_a_bool() -> None:
    """A per_node that is not True or False is refused by name."""
    with pytest.raises(ConfigurationError, match="per_node 'yes' must be True or False"):
        CircuitBreaker(per_node="yes")  # type: ignore[arg-type]
