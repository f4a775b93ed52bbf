"""ServiceStats' two histograms, flushed in bulk: the same exposition as observe per sample.

The response time (``ratelimit_service_response_time_seconds``) and the store latency
(``ratewarden_store_latency_seconds``) are tallied per call and observed together at each
flush; what GET /metrics shows must be what observing each sample as it came would show.
"""

from __future__ import annotations

import math
import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.metrics import LATENCY_BUCKETS
from ratewarden.server.stats import ServiceStats
from ratewarden.server.tally import MAX_PENDING
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED

RESPONSE = "ratelimit_service_response_time_seconds"
STORE = "ratewarden_store_latency_seconds"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def histogram_samples(text: str) -> Samples:
    """The samples of the two histograms in an exposition, ``_created`` aside."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        if family.name in (RESPONSE, STORE)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def durations(count: int, seed: int) -> list[float]:
    """``count`` call-like durations (around half a millisecond, a few slow ones), every
    bucket bound among them exactly."""
    rng = random.Random(seed)
    times = [rng.lognormvariate(-7.5, 1.5) for _ in range(count - len(LATENCY_BUCKETS))]
    return [*LATENCY_BUCKETS, *times]


def test_a_flush_shows_the_histograms_that_observe_per_sample_would() -> None:
    """More calls and store calls than a tally holds (so the tally flushes itself once on
    the way), then a scrape: both histograms' bucket lines and counts are those of
    histograms that observed every sample as it came, the sums equal within 1e-9."""
    calls, stores = durations(MAX_PENDING + 1808, 1), durations(MAX_PENDING + 1808, 2)
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    for call, store in zip(calls, stores, strict=True):
        stats.on_store_call(store)
        stats.request(call, failed=call > 0.5)
    reference = CollectorRegistry()
    response = Histogram(
        RESPONSE, "d", ("grpc_method",), buckets=LATENCY_BUCKETS, registry=reference
    ).labels("ShouldRateLimit")
    store_latency = Histogram(STORE, "d", buckets=LATENCY_BUCKETS, registry=reference)
    for call, store in zip(calls, stores, strict=True):
        response.observe(call)
        store_latency.observe(store)

    body, _ = stats.exposition()
    found = histogram_samples(body.decode())
    expected = histogram_samples(generate_latest(reference).decode())
    assert found.keys() == expected.keys()
    assert len(found) == 2 * (len(LATENCY_BUCKETS) + 3)  # each: buckets with +Inf, count, sum
    for key, value in expected.items():
        if key[0].endswith("_sum"):
            assert math.isclose(found[key], value, rel_tol=1e-9), key
        else:
            assert found[key] == value, key
    assert found[(RESPONSE + "_count", (("grpc_method", "ShouldRateLimit"),))] == len(calls)
    assert found[(STORE + "_count", ())] == len(stores)
