"""Rate's refusals at its edges say what is wrong: a period too long (not "too fine-grained"),
one under a microsecond (not "must be longer than zero"), a limit past what any limit of the
period counts exactly (the largest that always fits); and every short unit takes a plural."""

from __future__ import annotations

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError


@pytest.mark.parametrize(
    ("text", "unit"), [("1/yrs", "1/year"), ("1/wks", "1/week"), ("1/mos", "1/month")]
)
def test_the_plurals_of_every_short_name_are_units(text: str, unit: str) -> None:
    """yrs, wks and mos, as hrs, mins and secs."""
    assert Rate.parse(text) == Rate.parse(unit)


def test_a_period_too_long_is_refused_as_too_long_with_the_longest() -> None:
    """1 per 999,999,999 days: too long, and the longest period (100 years) builds."""
    with pytest.raises(ConfigurationError) as caught:
        Rate.parse("1/999999999days")
    message = str(caught.value)
    assert "fine-grained" not in message
    assert message.startswith("Rate 1 per 999999999 days has a period too long to count exactly")
    assert message.endswith("use a period of at most 100 years (36,500 days)")
    Rate.parse("1/36500days")


@pytest.mark.parametrize("period", [1e-7, 4e-7])
def test_a_period_under_a_microsecond_says_so(period: float) -> None:
    """Positive but under 1 us: the floor is named."""
    with pytest.raises(ConfigurationError, match="shorter than 1 microsecond, the finest"):
        Rate(10, period)


def test_zero_and_negative_periods_must_be_longer_than_zero() -> None:
    """What is not positive keeps its message."""
    for period in (0, -1.0):
        with pytest.raises(ConfigurationError, match="must be longer than zero"):
            Rate(10, period)


def test_a_limit_past_any_limit_of_the_period_names_the_largest_that_always_fits() -> None:
    """2,147,483,647 per minute shares no factor with 60,000,000 us: refused, naming
    150,119,985 (any limit up to it fits a minute); 2**31 per hour shares 2**10 and fits."""
    with pytest.raises(ConfigurationError) as caught:
        Rate.parse("2147483647/minute")
    assert "a limit of at most 150,119,985 (any limit up to it fits this period)" in str(
        caught.value
    )
    Rate.parse("150119985/minute")
    Rate(2**31, 3600)
    assert (2**53 - 1) // (3600 * 10**6 + 1) == 2_501_999
    Rate.parse("2501999/hour")
