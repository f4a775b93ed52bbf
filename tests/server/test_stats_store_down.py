"""A store outage in serve's metrics and dashboard: degraded decisions, not hits over the limit.

When Redis fails, a rule's failure mode answers without checking any limit.
envoyproxy/ratelimit counts none of total_hits / within_limit / over_limit /
near_limit then (only the Redis error); ratewarden counts such a descriptor in
``failure_mode_allowed`` / ``failure_mode_denied``, ``store_error`` and
``ratewarden_degraded_total``, and the dashboard shows the rule ``degraded``. A
real redis-server is stopped mid-test; the registry is read back through
prometheus_client's text parser.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratewarden.server import config
from ratewarden.server.dashboard.view import render
from ratewarden.server.service import RateLimitService
from ratewarden.server.stats import ServiceStats
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT, RedisServer
from tests.server.conftest import ALIGNED, OK, OVER, desc
from tests.server.test_stats import RULES, ask, value

pytestmark = pytest.mark.redis

P = "ratelimit_service_rate_limit_"


@pytest.fixture
def outage() -> Iterator[tuple[ServiceStats, RateLimitService, RedisServer]]:
    """Stats and a service over a redis-server of its own, which the test may stop."""
    from ratewarden.storage.redis import RedisStore

    server = RedisServer()
    clock = ManualClock(ALIGNED)
    store = RedisStore.from_url(server.url, clock=clock, timeout=STORE_TIMEOUT)
    stats = ServiceStats(clock=clock)
    rules = config.loads(RULES, "rules.yaml")
    try:
        yield stats, RateLimitService(rules, store, hooks=stats), server
    finally:
        store.close()
        server.stop()


def per_key(stats: ServiceStats, counter: str, key: str) -> float:
    return value(stats, P + counter + "_total", domain="web", key=key)


def test_failure_mode_answers_are_not_counted_as_hits_within_or_over_the_limit(
    outage: tuple[ServiceStats, RateLimitService, RedisServer],
) -> None:
    """Store down: 4 calls closed (OVER_LIMIT), 3 open (OK) move only the failure-mode,
    store_error and degraded series; total_hits, within, over and near stay where they were."""
    stats, svc, server = outage
    assert ask(svc, desc(("fragile", "f"))).overall_code == OK  # counted: the store answered
    server.stop()
    for _ in range(4):
        assert ask(svc, desc(("fragile", "f"))).overall_code == OVER
    for _ in range(3):
        assert ask(svc, desc(("lenient", "l"))).overall_code == OK
    assert per_key(stats, "total_hits", "fragile") == 1
    assert per_key(stats, "within_limit", "fragile") == 1
    assert per_key(stats, "over_limit", "fragile") == 0
    assert per_key(stats, "total_hits", "lenient") == 0
    assert per_key(stats, "within_limit", "lenient") == 0
    assert per_key(stats, "near_limit", "lenient") == 0
    denied = {"domain": "web", "key": "fragile", "failure_mode": "closed"}
    assert value(stats, P + "failure_mode_denied_total", **denied) == 4
    allowed = {"domain": "web", "key": "lenient", "failure_mode": "open"}
    assert value(stats, P + "failure_mode_allowed_total", **allowed) == 3
    errors = "ratelimit_service_should_rate_limit_error_total"
    assert value(stats, errors, err_type="store_error") == 7


def test_the_dashboard_shows_a_closed_rule_degraded_not_over(
    outage: tuple[ServiceStats, RateLimitService, RedisServer],
) -> None:
    """The closed rule's denials while the store is down: status ``degraded``, no ``over``
    count and no over-limit top key (it showed ``over`` before)."""
    stats, svc, server = outage
    server.stop()
    for _ in range(4):
        assert ask(svc, desc(("fragile", "f"))).overall_code == OVER
    view = render([stats.live.state()], svc.config.rules, stats.clock.now())
    [row] = [r for r in view["rules"] if r["path"] == "web.fragile"]
    assert row["status"] == "degraded"
    assert (row["totals"]["decisions"], row["totals"]["over"]) == (4, 0)
    assert row["totals"]["degraded"] == 4
    assert row["degraded_modes"] == {"closed": 4}
    assert view["top"]["over"] == []


def test_failure_mode_answers_are_decisions_allowed_or_denied(
    outage: tuple[ServiceStats, RateLimitService, RedisServer],
) -> None:
    """Store down: ``ratewarden_decisions_total`` counts the closed rule's 4 answers
    ``denied`` and the open rule's 3 ``allowed``, beside the store's own answer before the
    outage, as operations.md and the library's ``PrometheusMetrics`` count them."""
    stats, svc, server = outage
    assert ask(svc, desc(("fragile", "f"))).overall_code == OK
    server.stop()
    for _ in range(4):
        assert ask(svc, desc(("fragile", "f"))).overall_code == OVER
    for _ in range(3):
        assert ask(svc, desc(("lenient", "l"))).overall_code == OK
    decisions = "ratewarden_decisions_total"
    assert value(stats, decisions, rule="web.fragile", outcome="allowed") == 1
    assert value(stats, decisions, rule="web.fragile", outcome="denied") == 4
    assert value(stats, decisions, rule="web.lenient", outcome="allowed") == 3
    assert value(stats, decisions, rule="web.lenient", outcome="denied") == 0
    degraded = "ratewarden_degraded_total"
    assert value(stats, degraded, rule="web.fragile", failure_mode="closed") == 4
    assert value(stats, degraded, rule="web.lenient", failure_mode="open") == 3
