"""ShouldRateLimit when the store fails, and what the hooks are told."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.service import DescriptorOutcome, ServiceHooks
from tests.server.conftest import OK, OVER, Harness, desc

Make = Callable[..., Harness]

FAILURE = """
domain: d
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 1, failure_mode: open}
  - key: default
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 1, failure_mode: closed}
  - key: local
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 2, failure_mode: local}
"""


@pytest.mark.parametrize("key", ["open", "default"])
def test_failure_mode_open_allows_when_the_store_is_down(rls: Make, key: str) -> None:
    """open (the default) answers OK while the store is down, with no current limit: nothing
    was counted, and Envoy would read one as ``x-ratelimit-remaining: 0`` (it skips a status
    without one when it writes the x-ratelimit headers)."""
    h = rls(FAILURE)
    h.outage.down = True
    for _ in range(3):
        response = h.ask(desc((key, "x")))
        assert response.overall_code == OK
        assert not response.statuses[0].HasField("current_limit")
        assert response.statuses[0].limit_remaining == 0
    assert [o.failure for o in h.hooks.outcomes] == ["open"] * 3
    assert len(h.hooks.store_errors) == 3


def test_failure_mode_closed_denies_when_the_store_is_down(rls: Make) -> None:
    """closed answers OVER_LIMIT while the store is down."""
    h = rls(FAILURE)
    h.outage.down = True
    assert h.codes(desc(("closed", "x"))) == [OVER, OVER]
    assert h.hooks.outcomes[-1].failure == "closed"
    assert not h.ask(desc(("closed", "x"))).statuses[0].HasField("current_limit")


def test_failure_mode_local_decides_on_an_in_process_bucket(rls: Make) -> None:
    """local enforces the rule in this process: 2 pass, the third is denied, then it refills."""
    h = rls(FAILURE)
    h.outage.down = True
    assert [h.codes(desc(("local", "x")))[0] for _ in range(3)] == [OK, OK, OVER]
    assert h.hooks.outcomes[-1].failure == "local"
    h.clock.advance(30)
    assert h.codes(desc(("local", "x")))[0] == OK


def test_the_store_answering_again_ends_the_failure_mode(rls: Make) -> None:
    """Once the store is back, its counters decide again (closed stops denying)."""
    h = rls(FAILURE)
    h.outage.down = True
    assert h.codes(desc(("closed", "x")))[0] == OVER
    h.outage.down = False
    assert h.codes(desc(("closed", "x")))[0] == OK
    assert h.hooks.outcomes[-1].failure is None


def test_any_store_exception_is_a_failure_not_a_crash(rls: Make) -> None:
    """An unexpected exception from the store is handled by the failure mode too."""
    h = rls(FAILURE)
    h.outage.down = True
    h.outage.error = RuntimeError("a bug in a client library")
    assert h.codes(desc(("closed", "x")), desc(("open", "y"))) == [OVER, OVER, OK]


def test_failure_modes_apply_per_rule_in_one_request(rls: Make) -> None:
    """Three rules, three failure modes in one request; the closed denial charges nothing."""
    h = rls(FAILURE)
    h.outage.down = True
    assert h.codes(desc(("open", "a")), desc(("closed", "b")), desc(("local", "c"))) == [
        OVER,
        OK,
        OVER,
        OK,
    ]
    # The local bucket was only checked: both of its requests are still there.
    assert [h.codes(desc(("local", "c")))[0] for _ in range(3)] == [OK, OK, OVER]


MIXED = """
domain: d
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: open}
  - key: local
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 2, failure_mode: local}
"""


def test_a_check_the_store_failed_is_not_sent_to_the_store_again_to_be_charged(
    rls: Make,
) -> None:
    """Two algorithms in one request are checked, then charged. With the store down each
    check fails once (one store call, one error each), and the admitted request is not sent
    to the store again to be charged, which would wait out a second timeout: the local rule
    is charged in its in-process bucket instead, so its third request is denied."""
    h = rls(MIXED)
    h.outage.down = True
    for expected in ([OK, OK, OK], [OK, OK, OK], [OVER, OK, OVER]):
        steps, errors = len(h.store.steps), len(h.hooks.store_errors)
        assert h.codes(desc(("open", "a")), desc(("local", "c"))) == expected
        assert len(h.store.steps) - steps == 2  # the two checks
        assert len(h.hooks.store_errors) - errors == 2
    assert [o.failure for o in h.hooks.outcomes[-2:]] == ["open", "local"]
    h.outage.down = False  # back: nothing was charged in the store meanwhile
    assert h.codes(desc(("open", "a")), desc(("local", "c"))) == [OK, OK, OK]
    assert [o.failure for o in h.hooks.outcomes[-2:]] == [None, None]


# ---------------------------------------------------------------- hooks

METRICS = """
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: path
        value: /api/*
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: path
        value: /fixed
        rate_limit: {unit: minute, requests_per_unit: 10}
"""


def test_on_decisions_is_told_once_a_request_and_by_default_tells_each_on_decision(
    rls: Make,
) -> None:
    """A hook overriding ``on_decisions`` gets a request's outcomes together, in request
    order, descriptors without a rule left out; the default passes each to
    ``on_decision``, and one that raises does not keep the others from it."""

    class PerRequest(ServiceHooks):
        def __init__(self) -> None:
            self.requests: list[list[str]] = []

        def on_decisions(self, domain: str, outcomes: Sequence[DescriptorOutcome]) -> None:
            self.requests.append([outcome.metric_key for outcome in outcomes])

    class FirstFails(ServiceHooks):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_decision(
            self, domain: str, rule: config.DescriptorRule, outcome: DescriptorOutcome
        ) -> None:
            self.seen.append(outcome.metric_key)
            if len(self.seen) == 1:
                raise RuntimeError("metrics backend down")

    h = rls(METRICS)
    per_request = PerRequest()
    h.service.hooks = per_request
    ask = (desc(("k", "v")), desc(("none", "n")), desc(("detailed", "v")))
    assert h.codes(*ask) == [OK, OK, OK, OK]
    assert h.codes(desc(("k", "v"))) == [OK, OK]
    assert per_request.requests == [["d.k", "d.detailed_v"], ["d.k"]]
    first_fails = FirstFails()
    h.service.hooks = first_fails
    assert h.codes(*ask) == [OK, OK, OK, OK]
    assert first_fails.seen == ["d.k", "d.detailed_v"]


def test_hooks_see_every_limited_descriptor_with_its_metric_key(rls: Make) -> None:
    """Metric keys follow envoyproxy/ratelimit: config path, request values where asked."""
    h = rls(METRICS)
    h.ask(
        desc(("k", "v")),
        desc(("detailed", "v")),
        desc(("tenant", "acme"), ("path", "/api/x")),
        desc(("tenant", "acme"), ("path", "/fixed")),
        desc(("none", "n")),
    )
    assert [o.metric_key for o in h.hooks.outcomes] == [
        "d.k",
        "d.detailed_v",
        "d.tenant_acme.path_/api/x",
        "d.tenant_acme.path_/fixed",
    ]
    first = h.hooks.outcomes[0]
    assert (first.domain, first.hits, first.over_limit, first.charged) == ("d", 1, False, True)
    assert first.rule.path == "d.k"
    assert first.decision is not None and first.decision.remaining == 9


def test_near_limit_hits_count_the_hits_above_the_ratio(rls: Make) -> None:
    """Limit 10, ratio 0.8: hits 9 and 10 are near the limit; a 3-hit request from 7 has 2."""
    h = rls(METRICS)
    near = []
    for _ in range(10):
        h.ask(desc(("k", "a")))
        near.append(h.hooks.outcomes[-1].near_limit_hits)
    assert near == [0] * 8 + [1, 1]
    h.ask(desc(("k", "b")), hits=7)
    h.ask(desc(("k", "b")), hits=3)
    assert h.hooks.outcomes[-1].near_limit_hits == 2


def test_near_limit_ratio_is_configurable_and_validated(rls: Make) -> None:
    """near_limit_ratio=0.5 moves the threshold; 0 or above 1 is refused."""
    h = rls(METRICS, near_limit_ratio=0.5)
    h.ask(desc(("k", "a")), hits=6)
    assert h.hooks.outcomes[-1].near_limit_hits == 1
    for bad in (0, 1.5, True):
        with pytest.raises(ConfigurationError):
            rls(METRICS, near_limit_ratio=bad)


def test_a_failing_hook_never_changes_the_answer(rls: Make) -> None:
    """An exception in a hook is logged and the response is still returned."""

    class Broken(ServiceHooks):
        def on_decision(
            self, domain: str, rule: config.DescriptorRule, outcome: DescriptorOutcome
        ) -> None:
            raise RuntimeError("metrics backend down")

        def on_store_error(
            self, domain: str, rule: config.DescriptorRule, error: Exception
        ) -> None:
            raise RuntimeError("metrics backend down")

    h = rls(FAILURE)
    h.service.hooks = Broken()
    assert h.codes(desc(("closed", "x"))) == [OK, OK]
    h.outage.down = True
    assert h.codes(desc(("closed", "x"))) == [OVER, OVER]
