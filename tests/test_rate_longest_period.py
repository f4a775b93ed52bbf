"""The longest period a Rate takes is 100 years (36,500 days), and a bucket refills from empty
within it: a state holds instants up to that far ahead of now, which must stay below 2**53
microseconds for Redis to count exactly (a 2**53 - 2 us period had Redis deny what memory
allowed). ``str(rate)`` is something ``Rate.parse`` reads back, microseconds included, and
the refusals say the period in words, with advice that does not change the rate many-fold."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.rate import MAX_PERIOD_US


def refused(*args: object) -> str:
    with pytest.raises(ConfigurationError) as caught:
        Rate(*args)  # type: ignore[arg-type]
    return str(caught.value)


def test_the_longest_period_is_100_years_and_a_microsecond_more_is_refused() -> None:
    """Rate(1, 100 years) builds; a microsecond more, and the old edge 2**53 - 2 us, do not."""
    assert MAX_PERIOD_US == 36_500 * 86_400 * 10**6
    assert Rate(1, timedelta(microseconds=MAX_PERIOD_US)) == Rate.parse("1/100y")
    for period_us in (MAX_PERIOD_US + 1, 2**53 - 2):
        message = refused(1, timedelta(microseconds=period_us))
        assert "has a period too long to count exactly" in message
        assert message.endswith("use a period of at most 100 years (36,500 days)")
    with pytest.raises(ConfigurationError, match="at most 100 years"):
        Rate.parse("1/101y")


def test_a_huge_period_is_said_in_years_not_in_300_digits() -> None:
    """Rate(10, 1e300) and Rate(10, 2**64) say 'about N years' and advise the longest."""
    assert refused(10, 1e300).startswith("Rate 10 per 3.17e+292 years has a period too long")
    message = refused(10, 2**64)
    assert message.startswith("Rate 10 per 5.85e+11 years has a period too long")
    assert "9,007,199,254,740,990" not in message and len(message) < 400


def test_a_burst_that_takes_over_100_years_to_refill_is_refused_with_what_fits() -> None:
    """1 per day with burst 100,000 refills in 274 years: refused, naming the largest burst
    (36,500) and the longest period; both build, one more of the burst does not."""
    message = refused(1, 86_400, 100_000)
    assert message.startswith("Rate 1 per day with burst 100000 takes 274 years to refill")
    assert "use a burst of at most 36,500, or a period of at most 8 hours" in message
    Rate(1, 86_400, 36_500)
    Rate(1, 8 * 3_600, 100_000)
    refused(1, 86_400, 36_501)


def test_a_limit_of_one_is_not_advised_a_limit_many_times_it() -> None:
    """1 per 100 years with burst 2: no "limit that divides the period (17, say)" for a rate
    of 1; the burst and period it offers build."""
    message = refused(1, timedelta(days=36_500), 2)
    assert "divides" not in message
    assert message.endswith("use a burst of at most 1, or a period of at most 50 years")
    Rate(1, timedelta(days=36_500), 1)
    Rate(1, timedelta(days=50 * 365), 2)


@pytest.mark.parametrize(
    "rate",
    [Rate(2, 0.0003), Rate(1, timedelta(microseconds=1)), Rate(7, 1.000001), Rate(3, 60)],
)
def test_str_of_a_rate_parses_back_to_it(rate: Rate) -> None:
    """'2/300us', '1/1us', '7/1000001us', '3/minute': each parses back to the same rate."""
    assert Rate.parse(str(rate)) == rate


@pytest.mark.parametrize(
    ("text", "period_us"),
    [
        ("5/300us", 300),
        ("5/300 µs", 300),
        ("5 per 3 μs", 3),
        ("5/2usecs", 2),
        ("5/7 microseconds", 7),
        ("5/US", 1),
    ],
)
def test_microseconds_are_a_unit(text: str, period_us: int) -> None:
    """us, µs (the micro sign), μs (the Greek mu), usec(s), microsecond(s); any case."""
    assert Rate.parse(text).period_us == period_us


def test_a_fractional_multiple_is_told_how_to_write_it() -> None:
    """'1/0.5s' is refused with the whole multiple and the Rate() that say the same."""
    with pytest.raises(ConfigurationError) as caught:
        Rate.parse("1/0.5s")
    assert str(caught.value).endswith(
        "the period multiple must be whole: write 1/500ms, or Rate(1, 0.5)"
    )
    assert Rate.parse("1/500ms") == Rate(1, 0.5)
