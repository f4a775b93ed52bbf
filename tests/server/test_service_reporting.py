"""What the service reports while its limiter decides: store calls, failures, cached checks.

Over every backend and both twins (tests/server/conftest.py): each store call is
timed once (``on_store_call``), an open breaker is reported as the store being
unavailable, an outage is logged in the service's words only, the ``local``
failure mode shows its in-process decision as it is, and a check made for a
remembered denial costs no store call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from ratewarden.errors import CircuitOpenError, StorageUnavailableError
from ratewarden.limiter import CircuitBreaker
from tests.server.conftest import OK, OVER, SERVICE_RULES, Harness, RecordingHooks, desc

Make = Callable[..., Harness]


class TimedHooks(RecordingHooks):
    """RecordingHooks that also keep every store call's duration."""

    def __init__(self) -> None:
        super().__init__()
        self.store_calls: list[float] = []

    def on_store_call(self, seconds: float) -> None:
        self.store_calls.append(seconds)


def test_every_store_call_is_timed_once(rls: Make) -> None:
    """One timing per hit, one per joint step (none for a step a Cluster declined), none for
    an answer from the over-limit cache."""
    h = rls(SERVICE_RULES, over_limit_cache=100)
    hooks = h.service.hooks = TimedHooks()
    h.ask(desc(("a", "x")), hits=2)
    assert len(hooks.store_calls) == 1
    h.ask(desc(("a", "y")), desc(("b", "y")), desc(("c", "y")))
    assert len(hooks.store_calls) == len(h.store.steps)
    if not h.clustered:  # a Cluster declines these keys: checked, then charged, one by one
        assert len(hooks.store_calls) == 2
    assert h.codes(desc(("a", "x"))) == [OVER, OVER]  # the store denies: timed
    assert h.codes(desc(("a", "x"))) == [OVER, OVER]  # remembered: no call, no timing
    assert len(hooks.store_calls) == len(h.store.steps)
    assert all(seconds >= 0 for seconds in hooks.store_calls)


def test_an_open_breaker_is_reported_as_the_store_being_unavailable(rls: Make) -> None:
    """Refused calls reach on_store_error as the breaker's CircuitOpenError, a
    StorageUnavailableError (the degraded metric's reason is breaker_open, as the library's),
    saying when the next probe goes."""
    h = rls(SERVICE_RULES)
    h.service.breaker = CircuitBreaker(failures=1, failure_ratio=None, clock=h.clock)
    h.outage.down = True
    assert h.codes(desc(("closed", "x"))) == [OVER, OVER]
    assert h.codes(desc(("closed", "x"))) == [OVER, OVER]
    (_, _, first), (_, path, refused) = h.hooks.store_errors
    assert first is h.outage.error
    assert type(refused) is CircuitOpenError and isinstance(refused, StorageUnavailableError)
    assert path == "d.closed" and str(refused).startswith("circuit breaker open")


def test_an_outage_is_logged_in_the_services_words_only(
    rls: Make, caplog: pytest.LogCaptureFixture
) -> None:
    """One rate-bounded 'store failed' line from the service, and no line of the limiter's."""
    h = rls(SERVICE_RULES)
    h.outage.down = True
    with caplog.at_level(logging.WARNING, logger="ratewarden"):
        for _ in range(3):
            h.ask(desc(("closed", "x")))
    lines = [(r.name, r.getMessage()) for r in caplog.records]
    assert len(lines) == 1, lines
    name, message = lines[0]
    assert name == "ratewarden.server.service"
    assert message.startswith("store failed (store unreachable (test outage));")
    assert message.endswith("failure_mode closed answers for d.closed")


def test_the_local_failure_mode_shows_its_decision_as_it_is(rls: Make) -> None:
    """The in-process decision reaches on_decision undegraded; the mode is in outcome.failure."""
    h = rls(SERVICE_RULES)
    h.outage.down = True
    assert h.codes(desc(("local", "l"))) == [OK, OK]
    outcome = h.hooks.outcomes[-1]
    assert outcome.failure == "local" and outcome.charged
    assert outcome.decision is not None
    assert outcome.decision.degraded == "" and outcome.decision.remaining == 1


def test_a_check_made_for_a_remembered_denial_makes_no_store_call(rls: Make) -> None:
    """Checked then charged (a cached denial rules out the joint step): only the other
    descriptor's check reaches the store; the denial answers a's check and its re-run."""
    h = rls(SERVICE_RULES, over_limit_cache=100)
    h.ask(desc(("a", "x")), hits=2)
    assert h.codes(desc(("a", "x"))) == [OVER, OVER]  # remembered now
    h.store.calls.clear()
    assert h.codes(desc(("b", "y")), desc(("a", "x"))) == [OVER, OK, OVER]
    assert [cost for _, cost in h.store.calls] == [0]
    assert h.hooks.outcomes[-1].local_cache
    assert h.remaining(("b", "y")) == 5
