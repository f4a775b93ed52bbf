"""A limit's whole period (``unit`` x ``unit_multiplier``): every period a Rate can count loads,
a longer one is refused naming ``unit_multiplier`` and the largest multiplier of its unit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.rate import UNITS, Rate
from ratewarden.server.config import ConfigError, loads
from ratewarden.server.config.limits import MAX_PERIOD_US

#: The largest unit_multiplier of each long unit: 36,500 days, in that unit's whole steps.
LONGEST = {"hour": 876_000, "day": 36_500, "week": 5_214, "month": 1_216, "year": 100}


def rate_limit(unit: str, multiplier: int, count: int = 1) -> str:
    return (
        "domain: d\ndescriptors:\n  - key: k\n"
        f"    rate_limit: {{unit: {unit}, requests_per_unit: {count}, "
        f"unit_multiplier: {multiplier}}}\n"
    )


def budget(unit: str, multiplier: int) -> str:
    return (
        "domain: d\ndescriptors:\n  - key: k\n"
        f"    budget: {{unit: {unit}, tokens_per_unit: 1, unit_multiplier: {multiplier}}}\n"
    )


def test_the_longest_period_is_the_longest_a_rate_of_one_request_counts() -> None:
    """MAX_PERIOD_US is rate.py's own edge: 1 request per MAX_PERIOD_US is a Rate, one
    microsecond more is not, so the reader refuses exactly what the Rate would."""
    Rate(1, timedelta(microseconds=MAX_PERIOD_US))
    with pytest.raises(ConfigurationError):
        Rate(1, timedelta(microseconds=MAX_PERIOD_US + 1))


@pytest.mark.parametrize("block", [rate_limit, budget])
@pytest.mark.parametrize(("unit", "most"), sorted(LONGEST.items()))
def test_the_longest_multiplier_of_each_unit_loads(block: object, unit: str, most: int) -> None:
    """unit: hour x 876000, day x 36500, week x 5214, month x 1216, year x 100 load, in both
    blocks."""
    assert callable(block)
    (rule,) = loads(block(unit, most)).rules
    assert rule.limits[0].period_us == most * UNITS[unit] <= MAX_PERIOD_US


@pytest.mark.parametrize("block", [rate_limit, budget])
@pytest.mark.parametrize(("unit", "most"), sorted(LONGEST.items()))
def test_one_more_is_refused_naming_unit_multiplier_and_the_largest(
    block: object, unit: str, most: int
) -> None:
    """One step past the longest period: one problem, on unit_multiplier's line, saying the
    longest period and the largest multiplier for the unit; not "too fine-grained"."""
    assert callable(block)
    with pytest.raises(ConfigError) as caught:
        loads(block(unit, most + 1), "t.yaml")
    (problem,) = caught.value.errors
    assert (problem.line, problem.key) == (4, "unit_multiplier")
    assert f"use unit_multiplier {most:,} or less" in problem.message
    assert "36,500 days (about 100 years)" in problem.message
    assert "fine-grained" not in problem.message


def test_a_day_times_the_old_documented_maximum_is_refused_with_the_real_one() -> None:
    """The audit's case: unit: day, unit_multiplier 1000000, 100 requests."""
    with pytest.raises(ConfigError) as caught:
        loads(rate_limit("day", 1_000_000, count=100), "t.yaml")
    (problem,) = caught.value.errors
    assert str(problem) == (
        "t.yaml:4: unit_multiplier: 1000000 x day is too long a period to count exactly: "
        "the longest is 36,500 days (about 100 years); with unit: day use unit_multiplier "
        "36,500 or less"
    )


@pytest.mark.parametrize("unit", ["second", "minute"])
def test_the_short_units_reach_the_multiplier_range_first(unit: str) -> None:
    """A million seconds or minutes is shorter than the longest period: they load, and
    past a million the range check answers (docs/config.md gives both bounds)."""
    loads(rate_limit(unit, 1_000_000))
    with pytest.raises(ConfigError) as caught:
        loads(rate_limit(unit, 1_000_001))
    (problem,) = caught.value.errors
    assert problem.key == "unit_multiplier" and "use 1 to 1000000" in problem.message
