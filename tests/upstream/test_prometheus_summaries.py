"""A mapping file's summaries report their quantiles, as statsd_exporter's do.

``AgedQuantiles`` (the window and the sketch) is pure logic, checked against the exact
quantiles of known values; then the whole path: a mapping file read, upstream's response
time observed through ``ServiceStats``, and ``/metrics``'s text parsed back.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.errors import ConfigurationError
from ratewarden.server.quantiles import ACCURACY, AgedQuantiles
from ratewarden.server.stats import ServiceStats
from ratewarden.server.statsd_mapping import DEFAULT_QUANTILES, SummaryOptions
from ratewarden.server.statsd_mapping_file import load_mapping, parse_mapping
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED

QS = (0.0, 0.1, 0.5, 0.9, 0.99, 1.0)


def exact(values: list[float], q: float) -> float:
    """The value of rank ``q * (n - 1)`` (rounded down), as the sketch ranks them."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def close(got: float, want: float) -> bool:
    return abs(got - want) <= ACCURACY * abs(want) + 1e-12


# --- the sketch and its window (pure logic) -----------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        [float(v) for v in range(1, 1001)],
        [random.Random(7).lognormvariate(0, 2) for _ in range(5000)],
        [random.Random(8).uniform(-50, 50) for _ in range(2000)] + [0.0] * 100,
        [0.003] * 10 + [12.5] * 3,
    ],
    ids=["1-1000", "lognormal", "signed-with-zeros", "two-values"],
)
def test_every_quantile_is_within_one_percent_of_the_exact_one(values: list[float]) -> None:
    window = AgedQuantiles(ManualClock(ALIGNED))
    window.observe(values)
    for q, got in zip(QS, window.quantiles(QS), strict=True):
        assert close(got, exact(values, q)), (q, got, exact(values, q))


def test_nothing_observed_is_nan_and_nan_is_not_observed() -> None:
    window = AgedQuantiles(ManualClock(ALIGNED))
    assert all(math.isnan(v) for v in window.quantiles(QS))
    window.observe([math.nan, 2.0, math.nan])
    assert window.quantiles((0.0, 1.0)) == pytest.approx([2.0, 2.0], rel=ACCURACY)


def test_a_value_counts_for_max_age_then_leaves_the_window() -> None:
    """Five streams of two minutes: a value is in every answer for eight to ten minutes
    (until the stream emptied last before it was observed comes round again), as in the Go
    client, then in none."""
    clock = ManualClock(ALIGNED)
    window = AgedQuantiles(clock, max_age=600.0, age_buckets=5)
    window.observe([1.0] * 10)
    clock.advance(359.0)
    window.observe([100.0] * 10)  # 359 s later
    clock.advance(240.0)  # 599 s after the first values
    assert window.quantiles((0.0, 1.0)) == pytest.approx([1.0, 100.0], rel=ACCURACY)
    clock.advance(1.0)  # 600 s: the first values are out (they had all ten minutes)
    assert window.quantiles((0.0, 1.0)) == pytest.approx([100.0, 100.0], rel=ACCURACY)
    clock.advance(239.0)  # 839 s: the second values, observed 1 s before the stream
    assert window.quantiles((0.5,)) == pytest.approx([100.0], rel=ACCURACY)  # turned at 360,
    clock.advance(1.0)  # leave when that stream answers, at 840 s: 481 s after them
    assert math.isnan(window.quantiles((0.5,))[0])


def test_a_long_idle_window_is_empty_and_takes_values_again() -> None:
    clock = ManualClock(ALIGNED)
    window = AgedQuantiles(clock, max_age=60.0, age_buckets=3)
    window.observe([5.0])
    clock.advance(6_000.0)
    assert math.isnan(window.quantiles((0.5,))[0])
    window.observe([7.0])
    clock.advance(39.0)
    assert window.quantiles((0.5,)) == pytest.approx([7.0], rel=ACCURACY)


@pytest.mark.parametrize(("max_age", "age_buckets"), [(0.0, 5), (60.0, 0)])
def test_a_window_needs_a_length_and_a_stream(max_age: float, age_buckets: int) -> None:
    with pytest.raises(ValueError, match="max_age must be positive"):
        AgedQuantiles(ManualClock(ALIGNED), max_age, age_buckets)


# --- the mapping file's options -----------------------------------------------------------

MAPPED = """\
defaults:
  summary_options: {quantiles: [{quantile: 0.25, error: 0.01}], max_age: 1m, age_buckets: 3}
mappings:
  - match: "ratelimit_server.*.response_time"
    name: "rt_default"
  - match: "own.*"
    name: "rt_own"
    summary_options:
      quantiles: [{quantile: 0.75, error: 0.01}, {quantile: 0.999, error: 0.0001}]
      max_age: 30s
      buf_cap: 1000
  - match: "legacy.*"
    name: "rt_legacy"
    quantiles: [{quantile: 0.6, error: 0.01}]
"""


def test_each_summary_takes_its_own_options_else_the_defaults() -> None:
    mapping = parse_mapping(yaml.safe_load(MAPPED), "m.yaml")
    assert mapping.summary == SummaryOptions((0.25,), 60.0, 3)
    default, own, legacy = (rule.summary for rule in mapping.rules)
    assert default == SummaryOptions((0.25,), 60.0, 3)
    assert own == SummaryOptions((0.75, 0.999), 30.0, 3)
    assert legacy == SummaryOptions((0.6,), 60.0, 3)
    plain = parse_mapping(yaml.safe_load("mappings: [{match: a, name: x}]"), "m.yaml")
    assert plain.rules[0].summary == SummaryOptions(DEFAULT_QUANTILES, 600.0, 5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "mappings: [{match: a, name: x, quantiles: [{quantile: 0.5}], "
            "summary_options: {quantiles: [{quantile: 0.9}]}}]",
            "quantiles both at the top and in summary_options",
        ),
        (
            "mappings: [{match: a, name: x, summary_options: {quantiles: [{quantile: 1.5}]}}]",
            "quantile 1.5 must be from 0 to 1",
        ),
        (
            "defaults: {summary_options: {age_buckets: -1}}",
            "age_buckets -1 must be a whole number, 0 or more",
        ),
        (
            "mappings: [{match: a, name: x, summary_options: {buf_cap: many}}]",
            "buf_cap 'many' must be a whole number",
        ),
        (
            "mappings: [{match: a, name: x, summary_options: {max_age: soon}}]",
            "max_age 'soon' must be a duration",
        ),
    ],
)
def test_a_bad_summary_option_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        parse_mapping(yaml.safe_load(text), "m.yaml")
    assert str(caught.value).startswith("m.yaml")


# --- through the service's stats and /metrics ---------------------------------------------

SUMMARY = """\
mappings:
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    scale: 0.001
    labels: {grpc_method: "$1"}
"""


def quantile_samples(stats: ServiceStats, name: str) -> dict[str, float]:
    body, _ = stats.exposition()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and "quantile" in sample.labels:
                assert sample.labels["grpc_method"] == "ShouldRateLimit"
                found[sample.labels["quantile"]] = sample.value
    return found


def test_metrics_show_the_response_times_quantiles_of_the_last_ten_minutes(
    tmp_path: Path,
) -> None:
    """With no observer_type, statsd_exporter's summary: quantiles 0.5, 0.9 and 0.99 of the
    last ten minutes beside the count and the sum, which keep counting."""
    (tmp_path / "mapper.yaml").write_text(SUMMARY)
    clock = ManualClock(ALIGNED)
    stats = ServiceStats(clock=clock, mapping=load_mapping(str(tmp_path / "mapper.yaml")))
    seconds = [n / 10_000 for n in range(1, 201)]  # 0.1 ms to 20 ms
    for value in seconds:
        stats.request(value)
    name = "ratelimit_service_response_time_seconds"
    got = quantile_samples(stats, name)
    assert set(got) == {"0.5", "0.9", "0.99"}
    for q in (0.5, 0.9, 0.99):
        assert close(got[str(q)], exact(seconds, q)), q
    body = stats.exposition()[0].decode()
    assert f'{name}_count{{grpc_method="ShouldRateLimit"}} 200.0' in body
    clock.advance(600.0)
    assert all(math.isnan(value) for value in quantile_samples(stats, name).values())
    assert f'{name}_count{{grpc_method="ShouldRateLimit"}} 200.0' in stats.exposition()[0].decode()


def test_a_mappings_own_quantiles_are_the_ones_shown(tmp_path: Path) -> None:
    text = SUMMARY + "    summary_options: {quantiles: [{quantile: 0.75, error: 0.01}]}\n"
    (tmp_path / "mapper.yaml").write_text(text)
    stats = ServiceStats(
        clock=ManualClock(ALIGNED), mapping=load_mapping(str(tmp_path / "mapper.yaml"))
    )
    for value in (0.001, 0.002, 0.003, 0.004, 0.005):
        stats.request(value)
    got = quantile_samples(stats, "ratelimit_service_response_time_seconds")
    assert list(got) == ["0.75"]
    assert close(got["0.75"], 0.004)
