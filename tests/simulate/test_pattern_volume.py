"""Patterns at extreme rates and shapes: the arrivals they offer match what they announce."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.simulate import patterns
from ratewarden.simulate.patterns import Horizon
from ratewarden.simulate.runner import START_US


def _horizon(limit: int, period_s: float, duration_s: float) -> Horizon:
    return Horizon(START_US, round(duration_s * 1e6), limit, round(period_s * 1e6))


def test_poisson_at_ten_million_a_second_offers_its_rate() -> None:
    """A gap of 0.1 us is below a float's spacing at the simulation's start (0.25 us): the
    arrivals still average the rate, within five standard deviations (seed 1)."""
    arrivals = patterns.Poisson(load=1, seed=1).arrivals(_horizon(10_000_000, 1, 0.01))
    assert abs(len(arrivals) - 100_000) < 5 * 100_000**0.5
    times = [t for t, _, _ in arrivals]
    assert times == sorted(times) and times[0] >= START_US and times[-1] < START_US + 10_000


def test_poisson_gaps_far_below_a_microsecond_end() -> None:
    """A billion times the rate for one microsecond: about 1,667 arrivals, in the microsecond,
    and the loop ends (it once spun forever on gaps a float could not add)."""
    horizon = _horizon(100, 60, 0.000001)
    arrivals = patterns.Poisson(load=1e9, seed=3).arrivals(horizon)
    assert abs(len(arrivals) - 1_667) < 5 * 1_667**0.5
    assert {t for t, _, _ in arrivals} == {START_US}


def test_onoff_volume_counts_only_the_on_phases_inside_the_run() -> None:
    """on=3600 in a 600 s run is 600 s of load 2 at 1000/s: 1.2 M requests, not refused as 7.2 M."""
    arrivals = patterns.OnOff(load=2, on=3600, off=60).arrivals(_horizon(1000, 1, 600))
    assert len(arrivals) == 1_200_000


def test_onoff_refusal_quotes_what_the_run_would_offer() -> None:
    """on=1e9 offers 6,000 requests in 600 s at 100/minute x 6; a run too large quotes its own
    count (the on phase cut to the run), not one for the whole on phase."""
    assert len(patterns.OnOff(on=1e9).arrivals(_horizon(100, 60, 600))) == 6_000
    with pytest.raises(ConfigurationError, match=r"about 6,000,000 requests in 600 s"):
        patterns.OnOff(load=1, on=1e9).arrivals(_horizon(10_000, 1, 600))


def test_onoff_at_a_sub_microsecond_gap_sends_each_burst_in_full() -> None:
    """Ten million a second, on 1 ms of every 2 ms, for 10 ms: 5 bursts of 10,000 (a float sum
    of 0.1 us gaps near the start lost them)."""
    arrivals = patterns.OnOff(load=1, on=0.001, off=0.001).arrivals(_horizon(10_000_000, 1, 0.01))
    assert len(arrivals) == 50_000
    assert max(t for t, _, _ in arrivals) - START_US < 9_000


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("steady:load=1,load=2", "load is given twice"),
        ("boundary:size=-3", "size='-3' must be a whole number, not negative"),
        ("retry-storm:seed=-1", "seed='-1' must be a whole number, not negative"),
    ],
)
def test_a_parameter_given_twice_or_negative_is_named(spec: str, words: str) -> None:
    """The last value no longer wins silently; a negative whole number says so."""
    with pytest.raises(ConfigurationError, match=words):
        patterns.parse(spec)
