"""The Metrics hooks that take many store latencies at once: store_latencies."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from ratewarden.metrics import NO_METRICS, Metrics, PrometheusMetrics


class Timings(Metrics):
    """A hook written before store_latencies: it overrides store_latency only."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def store_latency(self, *, seconds: float) -> None:
        self.seconds.append(seconds)


SAMPLES = [0.0003, 0.0001, 0.02, 0.0001, 4.0]


def test_store_latencies_gives_each_to_store_latency_in_order_by_default() -> None:
    """A Metrics that only knows store_latency sees every sample of store_latencies, in order;
    the no-op instance takes them too."""
    timings = Timings()
    timings.store_latencies(seconds=SAMPLES)
    assert timings.seconds == SAMPLES
    NO_METRICS.store_latencies(seconds=SAMPLES)


def test_prometheus_store_latencies_records_what_store_latency_for_each_records() -> None:
    """PrometheusMetrics.store_latencies (observed at once) and store_latency per sample
    leave the same ratewarden_store_latency_seconds series."""
    bulk, each = CollectorRegistry(), CollectorRegistry()
    PrometheusMetrics(bulk).store_latencies(seconds=SAMPLES)
    one_by_one = PrometheusMetrics(each)
    for seconds in SAMPLES:
        one_by_one.store_latency(seconds=seconds)
    name = "ratewarden_store_latency_seconds"

    def series(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (sample.name, sample.labels.get("le", "")): sample.value
            for family in registry.collect()
            if family.name == name
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    found, expected = series(bulk), series(each)
    assert found.pop((name + "_sum", "")) == pytest.approx(expected.pop((name + "_sum", "")))
    assert found == expected
    assert found[(name + "_count", "")] == len(SAMPLES)
