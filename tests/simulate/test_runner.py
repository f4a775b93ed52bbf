"""The runner: real algorithms in simulated time, and the table it summarises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import patterns, runner

RATE = Rate.parse("100/minute", burst=20)


def test_offered_is_admitted_plus_denied_for_every_algorithm() -> None:
    """Every arrival is decided once; the table's columns add up."""
    for name in algorithms.ALGORITHMS:
        summary = runner.run(patterns.parse("poisson:load=2"), name, RATE, 600).summary()
        assert summary.offered == summary.admitted + summary.denied
        assert summary.offered > 1_500


def test_traffic_under_the_limit_is_all_admitted() -> None:
    """steady at half the rate never meets any algorithm's limit."""
    for name in algorithms.ALGORITHMS:
        summary = runner.run(patterns.parse("steady:load=0.5"), name, RATE, 600).summary()
        assert summary.denied == 0, name


def test_the_boundary_burst_doubles_a_fixed_window_and_not_a_sliding_log() -> None:
    """2x the limit in a trailing minute for fixed_window; exactly the limit for sliding_log."""
    fixed = runner.run(patterns.parse("boundary"), "fixed_window", RATE, 600).summary()
    log = runner.run(patterns.parse("boundary"), "sliding_log", RATE, 600).summary()
    assert fixed.worst_window == 200
    assert fixed.worst_ratio == 2.0
    assert log.worst_window == 100


def test_window_algorithms_run_without_the_bucket_burst() -> None:
    """--burst applies to bucket algorithms; a window algorithm counts its limit."""
    summary = runner.run(patterns.parse("steady"), "fixed_window", RATE, 60).summary()
    assert summary.rate == "100/minute"
    bucket = runner.run(patterns.parse("steady"), "gcra", RATE, 60).summary()
    assert bucket.rate == "100/minute (burst 20)"


def test_p99_wait_is_reported_for_the_shaper_only() -> None:
    """A burst of 100 into a leaky bucket of 20 queues its last admitted (B - 1) x T = 11.4 s."""
    leaky = runner.run(patterns.parse("boundary"), "leaky_bucket", RATE, 600).summary()
    assert leaky.p99_wait_s == pytest.approx(11.4)
    gcra = runner.run(patterns.parse("boundary"), "gcra", RATE, 600).summary()
    assert gcra.p99_wait_s is None


def test_a_retry_storm_with_jitter_offers_differently_than_without() -> None:
    """The storm reacts to decisions: jitter changes when (and how often) clients retry."""
    plain = runner.run(patterns.parse("retry-storm"), "gcra", RATE, 600).summary()
    jitter = runner.run(patterns.parse("retry-storm:jitter=yes"), "gcra", RATE, 600).summary()
    assert plain.offered != jitter.offered
    assert plain.admitted <= 20 + 100 * 10  # capacity + 10 minutes at the rate


def test_worst_window_counts_a_trailing_half_open_period() -> None:
    """(t - P, t]: a request exactly one period older no longer counts."""
    assert runner.worst_window([(0, 1), (10, 1), (20, 1)], 10) == 1
    assert runner.worst_window([(0, 1), (9, 1), (10, 3)], 10) == 4
    assert runner.worst_window([], 10) == 0


@pytest.mark.parametrize("duration", [0, -1, float("nan"), float("inf"), 31 * 86_400])
def test_a_bad_duration_is_refused(duration: float) -> None:
    """Durations from 1 us to 30 days; anything else is a ConfigurationError."""
    with pytest.raises(ConfigurationError, match="duration"):
        runner.run(patterns.parse("steady"), "gcra", RATE, duration)


def test_a_run_past_the_decision_cap_stops_with_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reactive traffic cannot be sized up front, so the runner counts and stops."""
    monkeypatch.setattr(runner, "MAX_ARRIVALS", 500)
    with pytest.raises(ConfigurationError, match="more than 500 decisions"):
        runner.run(patterns.parse("retry-storm:base=0.001"), "gcra", RATE, 600)


def test_an_unknown_algorithm_lists_the_choices() -> None:
    """The algorithm name is checked by the same registry the stores use."""
    with pytest.raises(ConfigurationError, match="choose one of"):
        runner.run(patterns.parse("steady"), "moving_window", RATE, 60)


@settings(max_examples=30, deadline=None)
@given(
    limit=st.integers(1, 50),
    period_s=st.sampled_from([1, 10, 60]),
    burst=st.integers(1, 50),
    load=st.floats(0.2, 5),
    seed=st.integers(0, 1000),
)
def test_no_bucket_admits_more_than_capacity_plus_limit_in_a_period(
    limit: int, period_s: int, burst: int, load: float, seed: int
) -> None:
    """Invariant: a bucket admits at most B + L - 1 in any trailing period; the log at most L."""
    rate = Rate(limit, period_s, burst)
    pattern = patterns.parse(f"poisson:load={load},seed={seed}")
    for name in ("gcra", "token_bucket", "leaky_bucket"):
        summary = runner.run(pattern, name, rate, 5 * period_s).summary()
        assert summary.worst_window <= burst + limit - 1
    log = runner.run(pattern, "sliding_log", rate, 5 * period_s).summary()
    assert log.worst_window <= limit


def test_the_table_has_a_row_per_run_with_the_ratio() -> None:
    """format_table prints every summary with its worst-period ratio."""
    rows = [
        runner.run(patterns.parse("boundary"), name, RATE, 600).summary()
        for name in ("fixed_window", "leaky_bucket")
    ]
    table = runner.format_table(rows)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["pattern", "algorithm", "rate"]
    assert "200 (2.00x)" in lines[1]
    assert lines[2].endswith("11.400s")
