"""The families on serve's ``/metrics``: none that nothing in serve feeds.

``PrometheusMetrics`` also makes the load shedding middleware's and the region budgets'
families; serve showed them empty (HELP and TYPE only), though the docs say serve does not
export them. The registry is read back through prometheus_client's text parser.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.metrics import PrometheusMetrics
from ratewarden.server.stats import ServiceStats


def test_serve_metrics_have_no_family_serve_never_feeds() -> None:
    """ratewarden_shed_decisions_total and ratewarden_region_overshoot_requests showed as
    empty families (HELP and TYPE only); the library's other families are still there."""
    body, _ = ServiceStats().exposition()
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert "ratewarden_shed_decisions" not in names
    assert "ratewarden_region_overshoot_requests" not in names
    assert {"ratewarden_decisions", "ratewarden_degraded", "ratewarden_breaker_state"} <= names


def test_the_library_keeps_its_shedding_and_region_families() -> None:
    """Only serve leaves them out: PrometheusMetrics on a registry of its own has both."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    names: set[Any] = {family.name for family in registry.collect()}
    assert {"ratewarden_shed_decisions", "ratewarden_region_overshoot_requests"} <= names
