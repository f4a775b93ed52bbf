"""A rate too fine-grained to count exactly is refused in the user's words, with advice that works.

Exact state stays below 2**53; a rate whose state would pass it is a ConfigurationError
that names the rate as written (the limit per the period in its largest whole unit, not
microseconds), offers a smaller burst only when a burst was given (the window algorithms
take none), and every change it offers builds a Rate.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.server import config

#: A day short of the longest period (100 years, which is said in years): every limit of 7
#: fails there unless it divides.
DAYS = 36_499


def refusal(limit: int, period: timedelta, burst: int | None = None) -> str:
    with pytest.raises(ConfigurationError, match="too fine-grained to count exactly") as caught:
        Rate(limit, period, burst)
    return str(caught.value)


def test_without_a_burst_the_rate_is_named_as_written_and_no_burst_is_advised() -> None:
    """7 per 36,499 days: the days, not 3153513600000000us; no burst was given, so none is
    advised; the limits it offers divide the period and build, as does its longest period,
    and a day more is refused."""
    message = refusal(7, timedelta(days=DAYS))
    assert message.startswith(f"Rate 7 per {DAYS} days is too fine-grained")
    assert "burst" not in message
    assert "us " not in message and "microsecond" not in message
    assert "a limit that divides the period evenly (6 or 8, say)" in message
    assert message.endswith("or a period of at most 14,892 days")
    Rate(6, timedelta(days=DAYS))
    Rate(8, timedelta(days=DAYS))
    Rate(7, timedelta(days=14_892))
    refusal(7, timedelta(days=14_893))


def test_with_a_burst_the_largest_burst_that_fits_is_advised() -> None:
    """7 per year with a burst of a billion: the burst it names (285) builds and one more
    does not; no limit near 7 fits with that burst, so none is offered; 9 seconds fits."""
    message = refusal(7, timedelta(days=365), 10**9)
    assert message.startswith("Rate 7 per year with burst 1000000000 is too fine-grained")
    assert message.endswith("use a burst of at most 285, or a period of at most 9 seconds")
    Rate(7, timedelta(days=365), 285)
    refusal(7, timedelta(days=365), 286)
    Rate(7, timedelta(seconds=9), 10**9)


def test_a_period_with_no_whole_unit_is_shown_in_microseconds() -> None:
    """A period of no whole millisecond can only be said in microseconds, in words."""
    message = refusal(7, timedelta(microseconds=2_999_999_999_999_999))
    assert message.startswith("Rate 7 per 2999999999999999 microseconds is too fine-grained")


def test_every_change_offered_builds_a_rate() -> None:
    """For several refused rates, each burst, limit and period the message offers builds."""
    cases = [
        (7, timedelta(days=DAYS), None),
        (7, timedelta(days=DAYS), 7),
        (7, timedelta(days=DAYS), 9),
        (7, timedelta(days=365), 10**9),
        (13, timedelta(days=30_000), None),
        (2**31 - 1, timedelta(minutes=1), None),
    ]
    for limit, period, burst in cases:
        message = refusal(limit, period, burst)
        found = re.search(r"a burst of at most ([\d,]+)", message)
        if found:
            Rate(limit, period, int(found.group(1).replace(",", "")))
        found = re.search(r"divides the period evenly \(([\d, or]+), say\)", message)
        if found:
            for other in found.group(1).split(" or "):
                Rate(int(other.replace(",", "")), period, burst)
        found = re.search(r"a limit of at most ([\d,]+)", message)
        if found:
            Rate(int(found.group(1).replace(",", "")), period, burst)
        found = re.search(r"a period of at most ([\d,]+) (\w+?)s?$", message)
        assert found, message
        Rate.parse(f"{limit} per {found.group(1).replace(',', '')} {found.group(2)}", burst)


def test_a_window_rule_in_the_config_gets_no_burst_advice() -> None:
    """A fixed-window rule (no burst) is refused at requests_per_unit with the rate as the
    config wrote it and no word of a burst; a gcra rule with one is told its largest."""
    rules = (
        "domain: d\ndescriptors:\n"
        "  - key: k\n    rate_limit: {unit: day, "
        f"unit_multiplier: {DAYS}, requests_per_unit: 7}}\n"
        "  - key: g\n    rate_limit: {algorithm: gcra, unit: day, "
        f"unit_multiplier: {DAYS}, requests_per_unit: 7, burst: 9}}\n"
    )
    with pytest.raises(ConfigurationError) as caught:
        config.loads(rules, "rules.yaml")
    window, bucket = (line for line in str(caught.value).splitlines() if "fine-grained" in line)
    assert f"requests_per_unit: Rate 7 per {DAYS} days is too fine-grained" in window
    assert "burst" not in window
    assert f"burst: Rate 7 per {DAYS} days with burst 9 is too fine-grained" in bucket
    assert "a burst of at most 2," in bucket
