"""Degraded decisions and breaker transitions, counted by the real Prometheus backend."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ratewarden import Rate
from ratewarden.metrics import PrometheusMetrics
from ratewarden.testing import ManualClock
from ratewarden.tiers import CircuitBreaker, TwoTier
from tests.tiers._helpers import SwitchableStore


def test_an_outage_shows_up_in_prometheus() -> None:
    """20 requests in an outage: 20 degraded decisions by reason, the breaker gauge at open,
    one transition into open; after the probe, the gauge is back at closed."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    clock = ManualClock()
    store = SwitchableStore(clock=clock)
    breaker = CircuitBreaker(failures=3, cooldown=1.0, clock=clock, metrics=metrics, name="redis")
    tiers = TwoTier(store, failure_mode="local", breaker=breaker, metrics=metrics, name="search")
    rate = Rate.parse("100/minute")
    store.down = True
    for _ in range(20):
        tiers.hit("k", rate)

    def value(sample: str, **labels: str) -> float:
        found = registry.get_sample_value(sample, labels)
        return 0.0 if found is None else found

    degraded = "ratewarden_degraded_total"
    assert (
        value(degraded, rule="search", failure_mode="local", reason="StorageUnavailableError") == 3
    )
    assert value(degraded, rule="search", failure_mode="local", reason="breaker_open") == 17
    assert value("ratewarden_breaker_state", name="redis", state="open") == 1
    assert value("ratewarden_breaker_transitions_total", name="redis", state="open") == 1
    store.down = False
    clock.advance(1.0)
    tiers.hit("k", rate)
    assert value("ratewarden_breaker_state", name="redis", state="closed") == 1
    assert value("ratewarden_breaker_state", name="redis", state="open") == 0
    decisions = "ratewarden_decisions_total"
    assert value(decisions, rule="search", algorithm="gcra", outcome="allowed") == 21
