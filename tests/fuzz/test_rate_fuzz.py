"""Fuzzing ``Rate.parse``: every input is a correct Rate or a ConfigurationError, nothing else.

The oracle below reads the documented grammar on its own (``LIMIT/[MULT]UNIT``
or ``LIMIT per [MULT] UNIT``, units from ``UNITS``, case and outer spaces
ignored) and says what the Rate must be. Inputs that hit a known bug are kept
out of the property tests and pinned by strict xfail tests at the end, so the
property stays meaningful and the fix is noticed.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.rate import UNITS

SETTINGS = settings(max_examples=400, deadline=None)

# The grammar, read independently: \s and digits as Python's re reads them.
_ORACLE = re.compile(
    r"^\s*(?P<limit>[^/\s]+)\s*(?:/|\s+per\s+)\s*(?P<mult>\d+)?\s*(?P<unit>[^\W\d_]+)\s*$",
    re.IGNORECASE,
)
_TIMEDELTA_MAX_US = timedelta.max // timedelta(microseconds=1)
_EXACT = 2**53


def read_digits(digits: str) -> int:
    """Decimal digits of any script, read one by one (no int() string limit)."""
    value = 0
    for char in digits:
        value = value * 10 + unicodedata.decimal(char)
    return value


def expected(text: str) -> tuple[int, int] | None:
    """(limit, period_us) the grammar gives, or None when the text is not a valid rate."""
    found = _ORACLE.match(text)
    if found is None or not found.group("limit").isdecimal():
        return None
    unit_us = UNITS.get(found.group("unit").lower())
    limit = read_digits(found.group("limit"))
    mult = 1 if found.group("mult") is None else read_digits(found.group("mult"))
    if unit_us is None or limit == 0 or mult == 0:
        return None
    return limit, unit_us * mult


def refused_by_rate(limit: int, period_us: int, burst: int | None) -> bool:
    """Whether Rate itself refuses these values (too big to hold, burst, exactness)."""
    if limit >= _EXACT or period_us > _TIMEDELTA_MAX_US:
        return True
    try:
        Rate(limit, timedelta(microseconds=period_us), burst)
    except ConfigurationError:
        return True
    return False


def check(text: str, burst: int | None = None) -> None:
    try:
        rate = Rate.parse(text, burst=burst)
    except ConfigurationError as exc:
        assert str(exc), "an error must say what was wrong"
        want = expected(text)
        if want is not None:
            # Valid by the grammar: only the Rate itself may refuse it (size, burst, exactness).
            assert refused_by_rate(*want, burst), f"{text!r} is a valid rate: {exc}"
        return
    want = expected(text)
    assert want is not None, f"{text!r} parsed as {rate!r} but is not a rate"
    assert (rate.limit, rate.period_us) == want
    assert rate.burst == burst


units = st.sampled_from(sorted(UNITS)).flatmap(
    lambda unit: st.sampled_from([unit, unit.upper(), unit.title()])
)
digits = st.text("0123456789", min_size=1, max_size=25)
spaces = st.text(" \t\n\u00a0\u2003", max_size=3)
separators = st.sampled_from(["/", " per ", " PER ", "per", "//", " / ", ":", ""])

#: Close to the grammar: the interesting mistakes are small ones.
near_rates = st.builds(
    lambda sp1, limit, sep, sp2, mult, sp3, unit, sp4: (
        f"{sp1}{limit}{sep}{sp2}{mult}{sp3}{unit}{sp4}"
    ),
    spaces,
    st.one_of(
        digits,
        st.sampled_from(
            ["-1", "1.5", "0", "1e3", "١٢", "²", "x", "", "9" * 4301, "0" * 4400 + "7"]
        ),
    ),
    separators,
    spaces,
    st.one_of(st.just(""), digits, st.sampled_from(["9" * 4301, "0" * 4400 + "3"])),
    spaces,
    st.one_of(units, st.text(min_size=0, max_size=6)),
    spaces,
)


@SETTINGS
@given(st.text(max_size=40))
@example("")
@example("100/minute")
@example("100 per 5 minutes")
@example("100/0m")
@example("0/s")
def test_any_text_is_a_correct_rate_or_a_configuration_error(text: str) -> None:
    """Arbitrary Unicode text: nothing but ConfigurationError escapes, and a result is right."""
    check(text)


@SETTINGS
@given(near_rates)
def test_near_miss_rates_are_a_correct_rate_or_a_configuration_error(text: str) -> None:
    """Texts shaped like rates (odd spaces, separators, signs, units): right or a clear error."""
    check(text)


@SETTINGS
@given(near_rates, st.one_of(st.none(), st.integers(min_value=-5, max_value=2**60)))
def test_a_burst_is_kept_or_refused_with_a_configuration_error(
    text: str, burst: int | None
) -> None:
    """burst: any integer is stored as given or refused clearly (never a stray exception)."""
    check(text, burst)


@pytest.mark.parametrize("value", [None, 100, 1.5, b"100/minute", ["100/minute"]])
def test_a_non_string_is_a_configuration_error(value: object) -> None:
    """Only strings parse; anything else is refused with a message naming the value."""
    with pytest.raises(ConfigurationError, match="must be a string"):
        Rate.parse(value)  # type: ignore[arg-type]


# -- escapes the fuzzers found, now fixed (src/ratewarden/rate.py, Rate.parse) -------------


def test_a_superscript_limit_is_a_configuration_error() -> None:
    """'²/s' passes str.isdigit() but is not a whole number: ConfigurationError, not ValueError."""
    with pytest.raises(ConfigurationError, match="whole number"):
        Rate.parse("²/s")


@pytest.mark.parametrize("text", ["9" * 5000 + "/s", "1/" + "9" * 5000 + "s"])
def test_a_five_thousand_digit_number_is_a_configuration_error(text: str) -> None:
    """A limit or multiple too long to convert is refused as bad input, with its length."""
    with pytest.raises(ConfigurationError, match="5000 digits"):
        Rate.parse(text)


def test_leading_zeros_do_not_count_as_digits() -> None:
    """'000…01/s' with 5,000 zeros is still the rate 1/s: only significant digits count."""
    assert Rate.parse("0" * 5000 + "1/s") == Rate.parse("1/s")


def test_a_period_multiple_beyond_timedelta_is_a_configuration_error() -> None:
    """'1/99999999999999999999s', a period no timedelta holds: a ConfigurationError that
    names the longest period a Rate takes."""
    with pytest.raises(ConfigurationError, match=r"at most 100 years \(36,500 days\)"):
        Rate.parse("1/99999999999999999999s")


@given(st.text(min_size=1, max_size=60).filter(lambda t: t.isdecimal()))
@settings(max_examples=200, deadline=None)
def test_decimal_digits_of_any_script_read_as_their_value(digits: str) -> None:
    """Limits in any script's decimal digits parse to the number they spell, or refuse clearly."""
    check(f"{digits}/s")
