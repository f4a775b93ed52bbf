"""Fuzzing ``Rate.parse``: every input is a correct Rate or a ConfigurationError, nothing else.

The oracle below reads the documented grammar on its own (``LIMIT/[MULT]UNIT``
or ``LIMIT per [MULT] UNIT``, units from ``UNITS``, case and outer spaces
ignored) and says what the Rate must be. Inputs that hit a known bug are kept
out of the property tests and pinned by strict xfail tests at the end, so the
property stays meaningful and the fix is noticed.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.rate import UNITS

SETTINGS = settings(max_examples=400, deadline=None)

# The grammar, read independently: \s and digits as Python's re reads them.
_ORACLE = re.compile(
    r"^\s*(?P<limit>[^/\s]+)\s*(?:/|\s+per\s+)\s*(?P<mult>\d+)?\s*(?P<unit>[a-z]+)\s*$",
    re.IGNORECASE,
)
_TIMEDELTA_MAX_US = 86_400_000_000 * 999_999_999


def known_bug(text: str) -> bool:
    """Inputs that currently raise something other than ConfigurationError (see xfails)."""
    found = _ORACLE.match(text)
    if found is None:
        return False
    limit, mult = found.group("limit"), found.group("mult")
    if limit.isdigit() and not limit.isdecimal():  # superscripts: isdigit() yet not int()
        return True
    if limit.isdigit() and len(limit) > 4300:  # int() refuses over 4300 digits
        return True
    if mult is not None and len(mult) > 4300:
        return True
    unit_us = UNITS.get(found.group("unit").lower())
    return mult is not None and unit_us is not None and int(mult) * unit_us > _TIMEDELTA_MAX_US


def expected(text: str) -> tuple[int, int] | None:
    """(limit, period_us) the grammar gives, or None when the text is not a valid rate."""
    found = _ORACLE.match(text)
    if found is None or not found.group("limit").isdecimal():
        return None
    unit_us = UNITS.get(found.group("unit").lower())
    limit = int(found.group("limit"))
    mult = 1 if found.group("mult") is None else int(found.group("mult"))
    if unit_us is None or limit == 0 or mult == 0:
        return None
    return limit, unit_us * mult


def check(text: str, burst: int | None = None) -> None:
    assume(not known_bug(text))
    try:
        rate = Rate.parse(text, burst=burst)
    except ConfigurationError as exc:
        assert str(exc), "an error must say what was wrong"
        want = expected(text)
        if want is not None:
            # Valid by the grammar: only the Rate itself may refuse it (burst, exactness).
            with pytest.raises(ConfigurationError):
                Rate(want[0], timedelta(microseconds=want[1]), burst)
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
    st.one_of(digits, st.sampled_from(["-1", "1.5", "0", "1e3", "١٢", "x", ""])),
    separators,
    spaces,
    st.one_of(st.just(""), digits),
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


# -- known bugs, pinned (src/ratewarden/rate.py, Rate.parse) ---------------------------


@pytest.mark.xfail(
    strict=True,
    reason="rate.py Rate.parse: the limit is checked with str.isdigit(), which accepts "
    "superscript digits such as '²' that int() rejects, so a bare ValueError escapes",
)
def test_a_superscript_limit_is_a_configuration_error() -> None:
    """'²/s' is not a whole number of requests: ConfigurationError, not ValueError."""
    with pytest.raises(ConfigurationError):
        Rate.parse("²/s")


@pytest.mark.xfail(
    strict=True,
    reason="rate.py Rate.parse: int() of a limit or multiple longer than 4300 digits "
    "raises ValueError (Python's int string limit) instead of ConfigurationError",
)
def test_a_five_thousand_digit_limit_is_a_configuration_error() -> None:
    """A limit too long to convert is refused as bad input."""
    with pytest.raises(ConfigurationError):
        Rate.parse("9" * 5000 + "/s")


@pytest.mark.xfail(
    strict=True,
    reason="rate.py Rate.parse: timedelta(microseconds=unit_us * mult) overflows for a "
    "huge multiple and OverflowError escapes instead of ConfigurationError",
)
def test_a_period_multiple_beyond_timedelta_is_a_configuration_error() -> None:
    """'1/99999999999999999999s' names a period no timedelta holds: ConfigurationError."""
    with pytest.raises(ConfigurationError):
        Rate.parse("1/99999999999999999999s")
