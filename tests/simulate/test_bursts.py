"""The burst table: a greedy attacker against each algorithm reproduces the closed forms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import bursts

RATES = [
    Rate.parse("100/minute", burst=20),
    Rate.parse("100/minute"),
    Rate.parse("10/second", burst=3),
    Rate.parse("7/13s", burst=11),
    Rate.parse("300/hour", burst=90),
    Rate.parse("1/minute"),
]


@pytest.mark.parametrize("rate", RATES, ids=str)
@pytest.mark.parametrize("name", sorted(algorithms.ALGORITHMS))
def test_measured_worst_case_matches_the_closed_form(name: str, rate: Rate) -> None:
    """The attack finds exactly the analytic burst, worst period and state size."""
    measured = bursts.measure(name, rate)
    assert measured == bursts.analytic(name, rate)


def test_the_table_for_100_per_minute_burst_20() -> None:
    """The issue's acceptance numbers, one by one, from the measurement."""
    rate = Rate.parse("100/minute", burst=20)
    rows = {row.algorithm: row for row in bursts.burst_table(rate)}
    # Fixed window: 2x the limit at the boundary, all within one emission interval.
    assert rows["fixed_window"].worst_period == 200
    assert rows["fixed_window"].burst == 200
    # GCRA: tau / T + 1 back to back, with T = 0.6 s and tau = (B - 1) x T = 11.4 s.
    emission, tau = 0.6, 19 * 0.6
    assert rows["gcra"].burst == round(tau / emission) + 1 == 20
    # Token bucket: B at once, then the steady rate: B - 1 above the limit in a half-open period.
    assert rows["token_bucket"].burst == 20
    assert rows["token_bucket"].worst_period == 100 + 20 - 1
    # Sliding log: never above the limit, at the price of one entry per request.
    assert rows["sliding_log"].worst_period == 100
    assert rows["sliding_log"].state_ints == 200
    # Sliding window: the limit back to back, above it in a trailing period (adversarially).
    assert rows["sliding_window"].burst == 100
    assert 100 < rows["sliding_window"].worst_period < 200
    assert rows["sliding_window"].state_ints == 3


def test_a_bucket_admits_b_plus_l_in_a_closed_period() -> None:
    """Counting both ends of the minute, the bucket admits B + L (20 + 100 = 120)."""
    rate = Rate.parse("100/minute", burst=20)
    admitted, _ = bursts._greedy("token_bucket", rate, 1_700_000_000 * 1_000_000)
    times = [t for t, _ in admitted]
    closed = max(sum(1 for t in times if s <= t <= s + rate.period_us) for s in times)
    assert closed == 120


def test_format_bursts_shows_the_ratio_and_overshoot() -> None:
    """One line per algorithm, with the worst period as a multiple of the limit."""
    rate = Rate.parse("100/minute", burst=20)
    text = bursts.format_bursts(bursts.burst_table(rate, ["fixed_window", "gcra"]))
    lines = text.splitlines()
    assert lines[1].split()[0] == "fixed_window"
    assert "200 (2.00x)" in lines[1]
    assert "+100" in lines[1]
    assert "119 (1.19x)" in lines[2]


@settings(max_examples=25, deadline=None)
@given(
    limit=st.integers(1, 60),
    period_s=st.sampled_from([1, 7, 60, 3600]),
    burst=st.integers(1, 120),
    name=st.sampled_from(sorted(algorithms.ALGORITHMS)),
)
def test_the_closed_forms_hold_for_any_rate(
    limit: int, period_s: int, burst: int, name: str
) -> None:
    """Not just the rates above: the greedy attack reproduces the closed forms for random rates."""
    rate = Rate(limit, period_s, burst)
    assert bursts.measure(name, rate) == bursts.analytic(name, rate)


@pytest.mark.parametrize(
    ("rate", "names", "message"),
    [
        (Rate.parse("10001/minute"), ["gcra"], "at most 10,000"),
        (Rate.parse("100/minute", burst=20_000), ["token_bucket"], "at most 10,000"),
        (Rate.parse("1001/minute"), None, "sliding_log .* at most 1,000"),
    ],
)
def test_a_table_too_large_to_attack_is_refused_up_front(
    rate: Rate, names: list[str] | None, message: str
) -> None:
    """The attack decides one request at a time, so large limits are refused before it starts."""
    with pytest.raises(ConfigurationError, match=message):
        bursts.burst_table(rate, names)
