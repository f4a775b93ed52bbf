"""bounded(): every metric label and dashboard string has a length cap that keeps values apart."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratewarden.labels import HASH_CHARS, MARKER, MAX_LABEL_CHARS, MIN_LIMIT, bounded

limits = st.integers(min_value=MIN_LIMIT, max_value=300)


@given(st.text(), limits)
def test_never_longer_than_the_limit(text: str, limit: int) -> None:
    """Whatever the text, the result has at most ``limit`` characters."""
    assert len(bounded(text, limit)) <= limit


@given(st.text(), limits)
def test_short_text_is_unchanged_and_bounding_twice_changes_nothing(text: str, limit: int) -> None:
    """Text within the limit comes back as it is; a bounded text is within it (idempotent)."""
    once = bounded(text, limit)
    if len(text) <= limit:
        assert once == text
    assert bounded(once, limit) == once


@given(st.text(min_size=1), st.text(min_size=1), limits)
def test_long_values_sharing_their_start_stay_distinct(prefix: str, a: str, limit: int) -> None:
    """Two distinct long values that agree on everything the cut keeps still differ afterwards:
    the hash of the whole value follows the marker."""
    start = (prefix * limit)[:limit]
    b = a + "x"
    one, two = bounded(start + a, limit), bounded(start + b, limit)
    assert one != two
    assert len(one) == len(two) == limit
    assert one[: limit - 1 - HASH_CHARS] == start[: limit - 1 - HASH_CHARS]
    assert one[limit - 1 - HASH_CHARS] == MARKER


def test_the_hash_is_stable_across_processes() -> None:
    """The tail is BLAKE2b, not Python's salted hash(): the same value gives the same label in
    every worker and after a restart (this digest was computed once and written down)."""
    assert bounded("v" * 1000) == "v" * (MAX_LABEL_CHARS - 17) + MARKER + "f60eece969ea6fa4"


def test_many_distinct_long_values_give_as_many_labels() -> None:
    """10,000 distinct 50 KB values that differ only at their end give 10,000 distinct labels."""
    filler = "x" * 50_000
    labels = {bounded(filler + str(i)) for i in range(10_000)}
    assert len(labels) == 10_000


def test_a_lone_surrogate_is_hashed_not_raised() -> None:
    """A str that is not valid UTF-8 (a lone surrogate) is still bounded without an error."""
    assert len(bounded("\ud800" * 500)) == MAX_LABEL_CHARS


def test_a_limit_too_small_for_the_hash_is_refused() -> None:
    """A limit below MIN_LIMIT cannot hold the marker and the hash: ValueError names it."""
    with pytest.raises(ValueError, match="limit must be at least 32 characters, got 10"):
        bounded("short", 10)


def test_prometheus_metrics_bounds_every_label_it_writes() -> None:
    """PrometheusMetrics, as a library user drives it, with 10 KB rule, algorithm, mode, reason,
    breaker and region names: every label in the exposition is at most MAX_LABEL_CHARS, and
    three rules that differ only at their end stay three series."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ratewarden.decision import Decision
    from ratewarden.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    long = "n" * 10_000
    allowed = Decision(allowed=True, limit=1, remaining=0, reset_after=1.0, retry_after=0.0)
    for i in range(3):
        metrics.decision(rule=f"{long}{i}", algorithm=long, decision=allowed)
        metrics.degraded(rule=f"{long}{i}", failure_mode=long, reason=long)
    metrics.breaker(name=long, state="open")
    metrics.region_overshoot(region=long, requests=1)
    samples = [
        sample
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    ]
    assert max(len(value) for sample in samples for value in sample.labels.values()) == (
        MAX_LABEL_CHARS
    )
    rules = {s.labels["rule"] for s in samples if s.name == "ratewarden_decisions_total"}
    assert len(rules) == 3
