"""A status's ``duration_until_reset`` is whole seconds, rounded up, as envoyproxy/ratelimit's is.

Envoy writes ``x-ratelimit-reset`` from it and keeps the whole seconds only, so a wait of
0.99 s sent as such reads ``x-ratelimit-reset: 0`` on a 429: "retry now", which is wrong.
Every rule kind and both codes are asked a quarter of a second into a window (a ManualClock),
over every store and both service twins (tests/server/conftest.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden.headers import binding_layer
from tests.server.conftest import ALIGNED, OK, OVER, Harness, desc

Make = Callable[..., Harness]

RULES = """
domain: d
descriptors:
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: sliding
    rate_limit: {algorithm: sliding_window, unit: second, requests_per_unit: 1}
  - key: gcra
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1, burst: 2}
  - key: token
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 2}
  - key: leaky
    rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 1}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: several
    rate_limit:
      limits:
        - {unit: second, requests_per_unit: 1}
        - {unit: minute, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: zero
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tenant
    budget: {unit: minute, tokens_per_unit: 1000}
"""

#: A quarter of a second into a second: every wait below is a fraction of a second.
START = ALIGNED + 0.25


def _seconds(status: Any) -> tuple[int, int]:
    wait = status.duration_until_reset
    return int(wait.seconds), int(wait.nanos)


def _exact(h: Harness) -> float:
    """The exact wait behind the last status: the store's decision, as the service reads it."""
    decision = h.hooks.outcomes[-1].decision
    assert decision is not None
    if not decision.allowed:
        return float(decision.retry_after)
    if len(decision.layers) > 1:
        return float(binding_layer(decision).reset_after)
    return float(decision.reset_after)


@pytest.mark.parametrize("key", ["fixed", "sliding", "gcra", "token", "leaky", "several"])
def test_a_denial_reports_its_wait_rounded_up_to_whole_seconds(rls: Make, key: str) -> None:
    """Every algorithm, and several limits: the 429's wait is the exact wait (a fraction of a
    second past a whole one) rounded up, no nanos, never
    0; after it, the request is allowed."""
    h = rls(RULES, start=START, flaky=False)
    codes = [h.codes(desc((key, "a")))[0] for _ in range(4)]
    assert OVER in codes
    h.clock.advance(0.25)
    denied = h.ask(desc((key, "a"))).statuses[0]
    assert denied.code == OVER
    exact = _exact(h)
    assert exact % 1 > 0
    assert _seconds(denied) == (math.ceil(exact), 0)
    assert denied.duration_until_reset.seconds >= 1
    h.clock.advance(denied.duration_until_reset.seconds)
    assert h.codes(desc((key, "a")))[0] == OK


def test_an_allowed_status_reports_its_window_end_in_whole_seconds(rls: Make) -> None:
    """OK, 0.75 s before the window ends: duration_until_reset is 1 s, not 0.75."""
    h = rls(RULES, start=START, flaky=False)
    allowed = h.ask(desc(("fixed", "a"))).statuses[0]
    assert allowed.code == OK
    assert _exact(h) == pytest.approx(0.75)
    assert _seconds(allowed) == (1, 0)


def test_waits_above_a_second_round_up_never_down(rls: Make) -> None:
    """1 a minute, denied 0.25 s into the minute: 59.75 s reads 60 s, not 59."""
    h = rls(RULES, start=START, flaky=False)
    h.ask(desc(("minute", "a")))
    denied = h.ask(desc(("minute", "a"))).statuses[0]
    assert denied.code == OVER
    assert _exact(h) == pytest.approx(59.75)
    assert _seconds(denied) == (60, 0)


def test_a_shadow_rule_over_its_limit_reports_whole_seconds_with_ok(rls: Make) -> None:
    """Shadow mode answers OK while over: the wait it reports is whole seconds too."""
    h = rls(RULES, start=START, flaky=False)
    h.ask(desc(("shadow", "a")))
    over = h.ask(desc(("shadow", "a"))).statuses[0]
    assert over.code == OK and h.hooks.outcomes[-1].over_limit
    assert _seconds(over) == (1, 0)


def test_a_zero_limit_reports_the_end_of_its_window_in_whole_seconds(rls: Make) -> None:
    """requests_per_unit 0 (never asked of a store): 0.75 s to the second's end reads 1 s."""
    h = rls(RULES, start=START, flaky=False)
    denied = h.ask(desc(("zero", "a"))).statuses[0]
    assert denied.code == OVER
    assert _seconds(denied) == (1, 0)


def test_a_spent_budget_check_reports_whole_seconds(rls: Make) -> None:
    """A token budget's check on an empty budget: 60 ms to the next token reads 1 s."""
    h = rls(RULES, start=START, flaky=False)
    h.ask(desc(("tenant", "acme"), hits=1000))
    denied = h.ask(desc(("tenant", "acme"), hits=0)).statuses[0]
    assert denied.code == OVER
    assert _exact(h) == pytest.approx(0.06)
    assert _seconds(denied) == (1, 0)
