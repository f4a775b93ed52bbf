"""The middlewares' counting families (slots, budget reservations and tokens, idempotency
requests) are the library's: ``ratewarden serve`` feeds none of them, so its ``/metrics`` does
not show them as empty families (HELP and TYPE only), as it leaves out the load shedding and
region families. The registry is read back through prometheus_client's text parser."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.metrics import PrometheusMetrics
from ratewarden.server.stats import ServiceStats

FAMILIES = {
    "ratewarden_slots",
    "ratewarden_budget_reservations",
    "ratewarden_budget_tokens",
    "ratewarden_idempotency_requests",
}


def test_serve_metrics_leave_the_middleware_families_out() -> None:
    """serve's exposition has its own families and none of the middlewares'."""
    body, _ = ServiceStats().exposition()
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert names & FAMILIES == set()
    assert {"ratewarden_decisions", "ratewarden_degraded"} <= names


def test_the_library_has_them() -> None:
    """PrometheusMetrics on a registry of its own makes all four."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    assert {family.name for family in registry.collect()} >= FAMILIES
