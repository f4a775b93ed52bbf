"""The service's circuit breaker: an outage costs a few store calls, not one per descriptor."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.storage.memory import MemoryStore
from ratewarden.tiers import CircuitBreaker
from tests.server.conftest import OK, OVER, SERVICE_RULES, Harness, desc

Make = Callable[..., Harness]


def _with_breaker(h: Harness, failures: int = 3, cooldown: float = 5.0) -> CircuitBreaker:
    breaker = CircuitBreaker(
        failures=failures, failure_ratio=None, cooldown=cooldown, clock=h.clock
    )
    h.service.breaker = breaker
    return breaker


def test_an_open_breaker_answers_by_failure_mode_without_store_calls(rls: Make) -> None:
    """Three failures open it; the next 20 requests make no store call and follow the policy."""
    h = rls(SERVICE_RULES)
    breaker = _with_breaker(h)
    h.outage.down = True
    assert [h.codes(desc(("closed", "x")))[0] for _ in range(3)] == [OVER] * 3
    assert breaker.state == "open"
    calls = len(h.store.calls)
    assert calls == 3
    for _ in range(10):
        assert h.codes(desc(("closed", "x")))[0] == OVER
        assert h.codes(desc(("open", "y")))[0] == OK
    assert len(h.store.calls) == calls
    assert [o.failure for o in h.hooks.outcomes[-2:]] == ["closed", "open"]


def test_one_probe_after_the_cooldown_closes_the_breaker_when_the_store_is_back(rls: Make) -> None:
    """Still down at the first probe: open again; back at the next: closed, counters decide."""
    h = rls(SERVICE_RULES)
    breaker = _with_breaker(h, failures=2, cooldown=5.0)
    h.outage.down = True
    h.codes(desc(("closed", "x")))
    h.codes(desc(("closed", "x")))
    assert breaker.state == "open"
    h.clock.advance(5)
    calls = len(h.store.calls)
    assert h.codes(desc(("closed", "x")))[0] == OVER  # the probe, into a store still down
    assert len(h.store.calls) == calls + 1
    assert breaker.state == "open"
    h.outage.down = False
    h.clock.advance(4.9)
    assert h.codes(desc(("closed", "x")))[0] == OVER  # cool-down not over: no call
    assert len(h.store.calls) == calls + 1
    h.clock.advance(0.1)
    assert h.codes(desc(("closed", "x")))[0] == OK
    assert breaker.state == "closed"
    assert h.hooks.outcomes[-1].failure is None


def test_a_bug_in_the_store_does_not_open_the_breaker(rls: Make) -> None:
    """Only storage failures count against the store; an unexpected exception is no verdict."""
    h = rls(SERVICE_RULES)
    breaker = _with_breaker(h, failures=1)
    h.outage.down = True
    h.outage.error = RuntimeError("a bug in a client library")
    for _ in range(3):
        assert h.codes(desc(("closed", "x")))[0] == OVER
    assert breaker.state == "closed"
    assert len(h.store.calls) == 3


def test_a_breaker_must_be_a_circuit_breaker() -> None:
    loaded = config.loads(SERVICE_RULES, "test.yaml")
    with pytest.raises(ConfigurationError, match="not a CircuitBreaker"):
        RateLimitService(loaded, MemoryStore(), breaker="yes")  # type: ignore[arg-type]


def test_recovered_closes_an_open_breaker_before_its_cooldown(rls: Make) -> None:
    """A health ping that answers (``recovered``) closes the breaker: the store decides again."""
    h = rls(SERVICE_RULES)
    breaker = _with_breaker(h, failures=1, cooldown=60.0)
    h.outage.down = True
    assert h.codes(desc(("closed", "x")))[0] == OVER
    assert breaker.state == "open"
    h.outage.down = False
    assert h.codes(desc(("closed", "x")))[0] == OVER  # still open: no store call
    breaker.recovered()
    assert breaker.state == "closed"
    assert h.codes(desc(("closed", "x")))[0] == OK
    breaker.recovered()  # closed already: nothing changes
    assert breaker.state == "closed"


CHECKED_THEN_CHARGED = """
domain: d
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: open}
  - key: local
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 3, failure_mode: local}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


@pytest.mark.parametrize(
    "other",
    [("local", "c"), ("shadow", "s")],
    ids=["two algorithms", "a shadow rule beside (one joint check)"],
)
def test_a_descriptor_the_open_breaker_refused_counts_once_a_request(
    rls: Make, other: tuple[str, str]
) -> None:
    """A request that is checked, then charged: while the breaker is open each descriptor's
    check is refused and its failure mode answers, and the charge does not ask again (the
    breaker would refuse it a second time, a second store error and a second degraded
    decision for one descriptor). One store error per descriptor a request, open or not;
    the local rule is charged in its in-process bucket, once a request."""
    h = rls(CHECKED_THEN_CHARGED)
    breaker = _with_breaker(h, failures=2)
    h.outage.down = True
    codes = []
    for _ in range(4):
        errors = len(h.hooks.store_errors)
        codes.append(h.codes(desc(("open", "a")), desc(other)))
        assert len(h.hooks.store_errors) - errors == 2
    assert breaker.state == "open"
    steps = len(h.store.steps)
    h.codes(desc(("open", "a")), desc(other))
    assert len(h.store.steps) == steps  # refused: no store call
    if other[0] == "local":
        assert codes == [[OK, OK, OK]] * 3 + [[OVER, OK, OVER]]
    else:
        assert codes == [[OK, OK, OK]] * 4
