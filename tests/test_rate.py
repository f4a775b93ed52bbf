"""Rate values: parsing, units, multiples, bursts and clear errors."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ratewarden import ConfigurationError, Rate
from ratewarden.rate import format_period

MINUTE_US = 60_000_000


@pytest.mark.parametrize(
    ("text", "limit", "period_us"),
    [
        ("100/minute", 100, MINUTE_US),
        ("100/MINUTE", 100, MINUTE_US),
        ("  100 / minute ", 100, MINUTE_US),
        ("100 per minute", 100, MINUTE_US),
        ("100/5m", 100, 5 * MINUTE_US),
        ("100/5 minutes", 100, 5 * MINUTE_US),
        ("100 per 5 minutes", 100, 5 * MINUTE_US),
        ("10/s", 10, 1_000_000),
        ("10/second", 10, 1_000_000),
        ("10/250ms", 10, 250_000),
        ("5000/hour", 5000, 3_600_000_000),
        ("7/day", 7, 86_400_000_000),
        ("1/week", 1, 7 * 86_400_000_000),
        ("1/month", 1, 30 * 86_400_000_000),
        ("1/year", 1, 365 * 86_400_000_000),
        ("2/3y", 2, 3 * 365 * 86_400_000_000),
    ],
)
def test_parse_accepts_units_and_multiples(text: str, limit: int, period_us: int) -> None:
    """Every documented spelling parses to the same limit and period in microseconds."""
    rate = Rate.parse(text)
    assert (rate.limit, rate.period_us, rate.burst) == (limit, period_us, None)


def test_three_constructors_agree() -> None:
    """parse, timedelta and seconds build equal values; burst defaults to the limit."""
    assert Rate.parse("5/30s") == Rate(limit=5, period=timedelta(seconds=30)) == Rate(5, 30)
    assert Rate.parse("100/minute").capacity == 100
    assert Rate.parse("100/minute", burst=20).capacity == 20
    assert Rate.parse("100/minute", burst=20) != Rate.parse("100/minute")


def test_str_round_trips_through_parse() -> None:
    """str(rate) is a spelling parse accepts."""
    for text in ("100/minute", "100/5m", "3/second", "10/250ms", "1/year"):
        assert Rate.parse(str(Rate.parse(text))) == Rate.parse(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("100/minute", "minute"),
        ("100/5m", "5 minutes"),
        ("100/7200s", "2 hours"),
        ("10/250ms", "250 milliseconds"),
        ("1/year", "year"),
    ],
)
def test_format_period_in_words_reads_back_through_parse(text: str, words: str) -> None:
    """format_period(words=True) spells a period for people ("5 minutes"), in its largest whole
    unit, and "LIMIT per" that is a spelling parse accepts."""
    rate = Rate.parse(text)
    assert format_period(rate.period_us, words=True) == words
    assert Rate.parse(f"{rate.limit} per {words}") == rate
    assert format_period(1, words=True) == "microsecond"
    assert format_period(1500, words=True) == "1500 microseconds"


def test_parse_many_splits_on_semicolons_and_commas() -> None:
    """Several rates in one string, or a list of strings."""
    assert Rate.parse_many("10/second; 1000/hour") == (
        Rate.parse("10/second"),
        Rate.parse("1000/hour"),
    )
    assert Rate.parse_many(["10/s", "20/m"]) == Rate.parse_many("10/s,20/m")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", "LIMIT/UNIT"),
        ("abc", "LIMIT/UNIT"),
        ("100", "LIMIT/UNIT"),
        ("100/", "LIMIT/UNIT"),
        ("100/fortnight", "'fortnight'"),
        ("ten/minute", "'ten'"),
        ("-5/minute", "'-5' must be a whole number of requests, 1 or more"),
        ("1.5/second", "'1.5'"),
        ("0/minute", "at least 1"),
        ("10/0s", "multiple"),
    ],
)
def test_parse_errors_name_the_bad_part(text: str, names: str) -> None:
    """An unparsable rate raises ConfigurationError quoting the input and the part that is wrong."""
    with pytest.raises(ConfigurationError) as error:
        Rate.parse(text)
    assert repr(text) in str(error.value)
    assert names in str(error.value)


@pytest.mark.parametrize(
    ("limit", "period", "burst"),
    [
        (0, 60, None),
        (-1, 60, None),
        (1.5, 60, None),
        (True, 60, None),
        (10, 0, None),
        (10, -1, None),
        (10, timedelta(0), None),
        (10, 1e-9, None),
        (10, float("inf"), None),
        (10, "60", None),
        (10, 60, 0),
        (10, 60, 2.5),
    ],
)
def test_constructor_rejects_bad_values(limit: object, period: object, burst: object) -> None:
    """Zero, negative, fractional or non-numeric limits, periods and bursts are errors."""
    with pytest.raises(ConfigurationError):
        Rate(limit, period, burst)  # type: ignore[arg-type]


def test_rate_too_fine_to_count_exactly_is_rejected() -> None:
    """A burst so large that exact integer state would pass 2**53 is refused up front."""
    with pytest.raises(ConfigurationError, match="too fine-grained"):
        Rate(7, timedelta(days=365), burst=10**9)


def test_emission_interval_and_reduced_form() -> None:
    """3/second has T = 1/3 s, kept exactly as d/n = 1_000_000/3 microseconds."""
    rate = Rate.parse("3/second")
    assert rate.reduced == (3, 1_000_000)
    assert rate.emission_interval == pytest.approx(1 / 3)
    assert Rate.parse("30000/second").reduced == (3, 100)
