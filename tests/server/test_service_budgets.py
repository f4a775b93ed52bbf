"""ShouldRateLimit for a descriptor with a ``budget``: checked on hits 0, charged on hits N.

Every test runs over memory, a real redis-server and a 3-primary Cluster, on both
service twins (the ``backend`` and ``twin`` fixtures of tests/server/conftest.py),
with the stores themselves (no outage wrapper: a budget runs its own store
script, not ``Store.hit``). Time is a ManualClock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden.server import config
from ratewarden.server.service import AsyncRateLimitService, RateLimitService
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import free_port
from tests.server.conftest import (
    OK,
    OVER,
    Harness,
    Outage,
    RecordingHooks,
    desc,
)

Make = Callable[..., Harness]

#: 1,000 tokens a minute: one token back every 60 ms.
RULES = """
domain: d
descriptors:
  - key: tenant
    budget: {unit: minute, tokens_per_unit: 1000}
  - key: shadow
    shadow_mode: true
    budget: {unit: minute, tokens_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


@pytest.fixture
def budget_rls(rls: Make) -> Make:
    """``budget_rls(yaml_text=RULES, **options)``: a Harness over the parametrized store itself
    (no outage wrapper: a budget runs its own store script)."""

    def make(text: str = RULES, **options: Any) -> Harness:
        return rls(text, flaky=False, **options)

    return make


def _status(h: Harness, *descriptors: Any) -> Any:
    return h.ask(*descriptors).statuses[0]


def test_a_check_charges_nothing_and_reports_the_budget(budget_rls: Make) -> None:
    """hits 0: OK with current_limit = tokens per unit and the tokens left; nothing charged."""
    h = budget_rls()
    for _ in range(3):
        status = _status(h, desc(("tenant", "acme"), hits=0))
        assert status.code == OK
        assert status.limit_remaining == 1000
        assert status.current_limit.requests_per_unit == 1000
    assert [o.charged for o in h.hooks.outcomes] == [False] * 3


def test_hits_are_tokens_charged_up_to_an_empty_budget_and_never_refused(
    budget_rls: Make,
) -> None:
    """600 tokens, then 600 more with 400 left: both OK; the budget is empty, not in debt."""
    h = budget_rls()
    assert _status(h, desc(("tenant", "acme"), hits=600)).limit_remaining == 400
    charged = _status(h, desc(("tenant", "acme"), hits=600))
    assert charged.code == OK and charged.limit_remaining == 0
    assert h.hooks.outcomes[-1].charged
    h.clock.advance(0.06)  # one emission interval: one token back, so the debt was not kept
    assert _status(h, desc(("tenant", "acme"), hits=0)).limit_remaining == 1


def test_a_spent_budget_refuses_the_check_until_a_token_is_back(budget_rls: Make) -> None:
    """Empty: the check is OVER_LIMIT until a token is back, 60 ms later (duration_until_reset
    says 1 s: whole seconds, rounded up), then OK."""
    h = budget_rls()
    h.ask(desc(("tenant", "acme"), hits=1000))
    response = h.ask(desc(("tenant", "acme"), hits=0))
    assert response.overall_code == OVER
    wait = response.statuses[0].duration_until_reset
    assert (wait.seconds, wait.nanos) == (1, 0)
    assert h.hooks.outcomes[-1].decision.retry_after == pytest.approx(0.06)
    assert h.codes(desc(("tenant", "other"), hits=0)) == [OK, OK]  # another tenant's budget
    h.clock.advance(0.059)
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OVER, OVER]
    h.clock.advance(0.001)
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OK, OK]


def test_a_spent_budget_denies_the_request_without_charging_its_other_limits(
    budget_rls: Make,
) -> None:
    """Check + a request limit in one call: the empty budget denies, the request is not counted."""
    h = budget_rls()
    h.ask(desc(("tenant", "acme"), hits=1000))
    codes = h.codes(desc(("tenant", "acme"), hits=0), desc(("user", "u1")))
    assert codes == [OVER, OVER, OK]
    assert h.remaining(("user", "u1")) == 5
    h.clock.advance(0.06)
    assert h.codes(desc(("tenant", "acme"), hits=0), desc(("user", "u1"))) == [OK, OK, OK]
    assert h.remaining(("user", "u1")) == 4


def test_a_charge_beside_another_descriptor_is_charged_even_past_what_is_left(
    budget_rls: Make,
) -> None:
    """A stream-done call with the tokens and a request limit: both charged, never refused."""
    h = budget_rls()
    h.ask(desc(("tenant", "acme"), hits=700))
    codes = h.codes(desc(("tenant", "acme"), hits=600), desc(("user", "u1")))
    assert codes == [OK, OK, OK]
    assert h.remaining(("tenant", "acme")) == 0
    assert h.remaining(("user", "u1")) == 4


def test_two_charges_on_one_budget_in_one_call_are_both_charged(budget_rls: Make) -> None:
    """200 + 200 tokens on the same tenant with 300 left: both charged, up to an empty budget."""
    h = budget_rls()
    h.ask(desc(("tenant", "acme"), hits=700))
    codes = h.codes(desc(("tenant", "acme"), hits=200), desc(("tenant", "acme"), hits=200))
    assert codes == [OK, OK, OK]
    assert h.remaining(("tenant", "acme")) == 0


class _Calls(RecordingHooks):
    """RecordingHooks that count the store calls (each hit, budget call or joint step)."""

    calls = 0

    def on_store_call(self, seconds: float) -> None:
        self.calls += 1


def _store_calls(h: Harness) -> int:
    if not isinstance(h.service.hooks, _Calls):
        h.service.hooks = h.hooks = _Calls()
    return h.service.hooks.calls


def test_charges_are_not_looked_at_before_an_admitted_request_charges_them(
    budget_rls: Make,
) -> None:
    """Three budget charges and a request limit: a charge is never over, so the request
    asks the store five times (the limit's check, then the four charges), not eight;
    each status is what its charge left."""
    h = budget_rls()
    before = _store_calls(h)
    response = h.ask(
        desc(("tenant", "a"), hits=100),
        desc(("tenant", "b"), hits=200),
        desc(("tenant", "c"), hits=300),
        desc(("user", "u1")),
    )
    assert response.overall_code == OK
    assert [s.limit_remaining for s in response.statuses] == [900, 800, 700, 4]
    assert _store_calls(h) - before == 5
    assert [h.remaining(("tenant", t)) for t in "abc"] == [900, 800, 700]


def test_a_request_denied_by_another_limit_looks_at_its_charges_and_charges_none(
    budget_rls: Make,
) -> None:
    """The request limit is spent: the budget charges beside it are reported (what is
    left, OK) but not charged, and the limit's retry time is exact."""
    h = budget_rls()
    for _ in range(5):
        h.ask(desc(("user", "u1")))
    response = h.ask(desc(("tenant", "a"), hits=100), desc(("user", "u1")))
    assert [response.overall_code, *(s.code for s in response.statuses)] == [OVER, OK, OVER]
    assert response.statuses[0].limit_remaining == 1000
    assert response.statuses[0].current_limit.requests_per_unit == 1000
    assert response.statuses[1].duration_until_reset.seconds > 0
    assert h.remaining(("tenant", "a")) == 1000
    assert h.hooks.outcomes[-2].charged is False


def test_a_budget_check_is_asked_first_and_the_rest_in_one_step(budget_rls: Make) -> None:
    """A budget check and two request limits: the check alone, then the limits in one atomic
    step (two store calls; on a Cluster, whose slots differ, checked then charged)."""
    h = budget_rls(
        RULES
        + """
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 3}
"""
    )
    before = _store_calls(h)
    codes = h.codes(desc(("tenant", "acme"), hits=0), desc(("user", "u1")), desc(("route", "r")))
    assert codes == [OK, OK, OK, OK]
    if not h.clustered:
        assert _store_calls(h) - before == 2
    assert (h.remaining(("user", "u1")), h.remaining(("route", "r"))) == (4, 2)
    assert h.remaining(("tenant", "acme")) == 1000


def test_a_spent_budget_checked_first_leaves_the_request_limits_alone_and_reports_them(
    budget_rls: Make,
) -> None:
    """The budget is spent: the request is denied, its limits are looked at (what is left is
    reported) and not charged; one over on its own reports its exact wait."""
    h = budget_rls()
    h.ask(desc(("tenant", "acme"), hits=1000))
    for _ in range(5):
        h.ask(desc(("user", "spent")))
    response = h.ask(
        desc(("tenant", "acme"), hits=0), desc(("user", "u1")), desc(("user", "spent"))
    )
    assert [response.overall_code, *(s.code for s in response.statuses)] == [OVER, OVER, OK, OVER]
    assert [s.limit_remaining for s in response.statuses] == [0, 5, 0]
    assert response.statuses[2].duration_until_reset.seconds > 0
    assert (h.remaining(("user", "u1")), h.remaining(("user", "spent"))) == (5, 0)
    # Limits that all have room are not charged either (they would go together).
    codes = h.codes(desc(("tenant", "acme"), hits=0), desc(("user", "u1")), desc(("user", "u2")))
    assert codes == [OVER, OVER, OK, OK]
    assert (h.remaining(("user", "u1")), h.remaining(("user", "u2"))) == (5, 5)


def test_a_spent_budget_is_remembered_until_a_token_is_back(budget_rls: Make) -> None:
    """With the over-limit cache, a spent budget's checks are answered in process, their
    wait aged, until the token is back; then the store is asked again."""
    h = budget_rls(over_limit_cache=100)
    h.ask(desc(("tenant", "acme"), hits=1000))
    calls = _store_calls(h)
    response = h.ask(desc(("tenant", "acme"), hits=0))
    assert response.overall_code == OVER
    assert response.statuses[0].duration_until_reset.seconds == 1  # 60 ms, rounded up
    assert h.hooks.outcomes[-1].decision.retry_after == pytest.approx(0.06)
    assert _store_calls(h) == calls + 1
    cache = h.service.over_limit_cache
    assert cache is not None and len(cache) == 1  # one table, the limit's: a memory bound
    h.clock.advance(0.025)
    again = h.ask(desc(("tenant", "acme"), hits=0)).statuses[0]
    assert again.code == OVER and again.limit_remaining == 0
    assert again.duration_until_reset.seconds == 1  # 35 ms, rounded up
    assert h.hooks.outcomes[-1].decision.retry_after == pytest.approx(0.035)  # aged
    assert _store_calls(h) == calls + 1  # no store call
    assert h.codes(desc(("tenant", "other"), hits=0)) == [OK, OK]  # another key: asked
    assert _store_calls(h) == calls + 2
    h.clock.advance(0.035)  # the token is back
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OK, OK]
    assert _store_calls(h) == calls + 3


def test_a_remembered_spent_budget_still_takes_its_charges(budget_rls: Make) -> None:
    """A charge is never answered from the cache: it reaches the store and is recorded, and
    the check stays refused for as long as the store says."""
    h = budget_rls(over_limit_cache=100)
    h.ask(desc(("tenant", "acme"), hits=1000))
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OVER, OVER]
    calls = _store_calls(h)
    assert h.codes(desc(("tenant", "acme"), hits=50)) == [OK, OK]
    assert _store_calls(h) == calls + 1
    for _ in range(5):
        h.ask(desc(("user", "u1")))
    # Denied by the request limit: the charge is looked at, and a look is never over.
    assert h.codes(desc(("tenant", "acme"), hits=50), desc(("user", "u1"))) == [OVER, OK, OVER]
    h.clock.advance(0.06)  # one token back: the charge found the budget empty (no debt)
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OK, OK]


def test_without_the_over_limit_cache_every_budget_check_asks_the_store(
    budget_rls: Make,
) -> None:
    h = budget_rls()
    h.ask(desc(("tenant", "acme"), hits=1000))
    calls = _store_calls(h)
    for _ in range(3):
        assert h.codes(desc(("tenant", "acme"), hits=0)) == [OVER, OVER]
    assert _store_calls(h) == calls + 3


def test_a_config_reload_forgets_remembered_budgets(budget_rls: Make) -> None:
    h = budget_rls(over_limit_cache=100)
    h.ask(desc(("tenant", "acme"), hits=1000))
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OVER, OVER]
    calls = _store_calls(h)
    h.service.swap_config(h.service.config)
    assert h.codes(desc(("tenant", "acme"), hits=0)) == [OVER, OVER]
    assert _store_calls(h) == calls + 1


def test_a_rule_can_replace_a_budget_by_its_name(budget_rls: Make) -> None:
    """replaces names the budget: the budget is neither checked nor charged for that request."""
    h = budget_rls(
        """
domain: d
descriptors:
  - key: tenant
    budget: {unit: minute, tokens_per_unit: 1000, name: tenant_tokens}
  - key: vip
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: tenant_tokens}]}
"""
    )
    h.ask(desc(("tenant", "acme"), hits=1000))
    assert h.codes(desc(("tenant", "acme"), hits=0), desc(("vip", "yes"))) == [OK, OK, OK]
    assert h.ask(desc(("tenant", "acme"), hits=0)).overall_code == OVER


def test_shadow_mode_reports_ok_on_a_spent_budget(budget_rls: Make) -> None:
    """A shadow budget never denies; the outcome still says it was over."""
    h = budget_rls()
    h.ask(desc(("shadow", "acme"), hits=100))
    assert h.codes(desc(("shadow", "acme"), hits=0)) == [OK, OK]
    assert h.hooks.outcomes[-1].over_limit and h.hooks.outcomes[-1].shadowed


def test_envoy_limit_override_keeps_a_budget_a_budget(budget_rls: Make) -> None:
    """descriptor.limit sets the rate (10/second); a charge still goes past what is left."""
    h = budget_rls()
    second = 1  # RateLimitResponse.RateLimit.SECOND
    status = _status(h, desc(("tenant", "acme"), hits=25, limit=(10, second)))
    assert status.code == OK and status.limit_remaining == 0
    assert h.codes(desc(("tenant", "acme"), hits=0, limit=(10, second))) == [OVER, OVER]
    assert h.remaining(("tenant", "acme")) == 1000  # the configured budget is another counter


def test_a_budget_without_per_descriptor_hits_charges_the_request_hits(budget_rls: Make) -> None:
    """No hits_addend on the descriptor: the request's hits (0 means 1) are tokens to charge."""
    h = budget_rls()
    assert h.ask(desc(("tenant", "acme")), hits=0).statuses[0].limit_remaining == 999
    assert h.ask(desc(("tenant", "acme")), hits=40).statuses[0].limit_remaining == 959


@pytest.mark.parametrize(("mode", "code"), [("open", OK), ("closed", OVER)])
def test_failure_mode_answers_a_budget_check_when_the_store_is_down(mode: str, code: int) -> None:
    """A redis-server that is not there: open allows the check, closed denies it."""
    rules = config.loads(
        f"domain: d\ndescriptors:\n  - key: tenant\n"
        f"    budget: {{unit: minute, tokens_per_unit: 10, failure_mode: {mode}}}\n"
    )
    url = f"redis://127.0.0.1:{free_port()}/0"
    hooks = RecordingHooks()
    store = RedisStore.from_url(url, timeout=0.2)
    try:
        h = Harness(
            RateLimitService(rules, store, hooks=hooks), ManualClock(), hooks, Outage(), store
        )  # type: ignore[arg-type]
        assert h.codes(desc(("tenant", "acme"), hits=0)) == [code, code]
        assert h.hooks.outcomes[-1].failure == mode
        assert len(h.hooks.store_errors) == 1
    finally:
        store.close()


def test_the_async_service_falls_back_the_same_way() -> None:
    """AsyncRateLimitService on a dead redis: closed denies the budget check."""
    rules = config.loads(
        "domain: d\ndescriptors:\n  - key: tenant\n"
        "    budget: {unit: minute, tokens_per_unit: 10, failure_mode: closed}\n"
    )
    store = AsyncRedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)

    async def ask() -> Any:
        service = AsyncRateLimitService(rules, store)
        try:
            return await service.should_rate_limit(_request("d", desc(("tenant", "acme"), hits=0)))
        finally:
            await store.aclose()

    assert asyncio.run(ask()).overall_code == OVER


def _request(domain: str, *descriptors: Any) -> Any:
    from envoy.service.ratelimit.v3 import rls_pb2

    return rls_pb2.RateLimitRequest(domain=domain, descriptors=list(descriptors))
