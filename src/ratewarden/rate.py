"""Rates: a limit per period, with an optional burst.

``Rate.parse("100/minute")``, ``Rate.parse("100/5m", burst=20)`` and
``Rate(limit=5, period=timedelta(seconds=30))`` are the three spellings. The
grammar of ``parse`` is::

    rate   := LIMIT ("/" | " per ") [MULT] UNIT
    UNIT   := us | µs | usec | microsecond | ms | msec | millisecond
              | s | sec | second | m | min | minute | h | hr | hour
              | d | day | w | wk | week | mo | month | y | yr | year

Every name of two letters or more but ``us``, ``µs`` and ``ms`` also takes an ``s``:
``usecs``, ``secs``, ``mins``, ``hrs``, ``days``, ``wks``, ``mos``, ``yrs``,
``microseconds`` ... ``years``.

``MULT`` is a whole number written before the unit, with or without a space:
``"100/5m"``, ``"100/5 minutes"`` and ``"100 per 5 minutes"`` are the same rate.
A month is 30 days and a year is 365 days. Case and surrounding spaces are
ignored.

``burst`` is the number of requests that may arrive back to back from a rested
key. It defaults to ``limit``: a full period's allowance at once, which is what
"100/minute" promises a rested caller. Bucket algorithms (GCRA, token bucket,
leaky bucket) use it as their capacity; window algorithms count ``limit`` per
window and reject an explicit burst that differs from it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from fractions import Fraction
from typing import ParamSpec, TypeVar

from ratewarden.errors import ConfigurationError, shown

__all__ = ["MAX_PERIOD_US", "UNITS", "Rate", "format_period"]

_SECOND_US = 1_000_000

#: Unit spellings and their length in microseconds.
UNITS: dict[str, int] = {}
for _names, _us in (
    (("us", "\N{MICRO SIGN}s", "\N{GREEK SMALL LETTER MU}s", "usec", "microsecond"), 1),
    (("ms", "msec", "millisecond"), 1_000),
    (("s", "sec", "second"), _SECOND_US),
    (("m", "min", "minute"), 60 * _SECOND_US),
    (("h", "hr", "hour"), 3_600 * _SECOND_US),
    (("d", "day"), 86_400 * _SECOND_US),
    (("w", "wk", "week"), 7 * 86_400 * _SECOND_US),
    (("mo", "month"), 30 * 86_400 * _SECOND_US),
    (("y", "yr", "year"), 365 * 86_400 * _SECOND_US),
):
    for _name in _names:
        UNITS[_name] = _us
        if len(_name) > 1 and not _name.endswith("s"):  # not ms, us: "mss" is no unit
            UNITS[_name + "s"] = _us

# "1/0.5s" matches (to be refused with a hint), each part one way only: linear in digits.
_PATTERN = re.compile(
    r"^\s*(?P<limit>[^/\s]+)\s*(?:/|\s+per\s+)\s*"
    r"(?P<mult>\d+(?:\.\d+)?|\.\d+)?\s*(?P<unit>[^\W\d_]+)\s*$",
    re.IGNORECASE,
)

# All state arithmetic is exact in integers below 2**53, the largest range in
# which a Redis Lua number (an IEEE double) is also exact.
_EXACT = 2**53
_MAX_DIGITS = 20

#: The longest period, and the longest a bucket takes to refill from empty (burst x
#: period / limit): 100 years of 365 days (36,500 days). A state holds instants up to that
#: far ahead of now (a GCRA's TAT, a sliding log's expiry; a sliding window's reset is two
#: periods), and now plus 100 years stays below 2**53 microseconds, where a Redis number is
#: still exact, until 2155 (``testing.ManualClock`` goes no later).
MAX_PERIOD_US = 100 * UNITS["year"]


def _period_us(period: timedelta | float | int) -> int:
    if isinstance(period, bool):
        raise ConfigurationError(f"Rate period {period!r} must be a timedelta or seconds")
    if isinstance(period, timedelta):
        us = period // timedelta(microseconds=1)
        whole = period == timedelta(microseconds=us)
    elif isinstance(period, int | float):
        if not math.isfinite(period):
            raise ConfigurationError(f"Rate period {period!r} must be a finite number of seconds")
        us = round(period * _SECOND_US)
        whole = abs(us - period * _SECOND_US) < 1e-6 * max(1.0, abs(period))
    else:  # anything: text, say, as long as it comes
        raise ConfigurationError(f"Rate period {shown(period)} must be a timedelta or seconds")
    if us <= 0:
        if not isinstance(period, timedelta) and period > 0:  # a timedelta holds whole us
            raise ConfigurationError(
                f"Rate period {period!r} is shorter than 1 microsecond, the finest a rate counts"
            )
        raise ConfigurationError(f"Rate period {shown(period)} must be longer than zero")
    if not whole:
        raise ConfigurationError(f"Rate period {period!r} is not a whole number of microseconds")
    return us


def _fraction_hint(found: re.Match[str]) -> str:
    """For ``"1/0.5s"``: the multiple must be whole, and how to write that period."""
    limit, mult, unit = found.group("limit", "mult", "unit")
    known = (limit + mult).isascii() and limit.isdecimal() and len(limit) <= _MAX_DIGITS
    us = Fraction(mult) * UNITS.get(unit.lower(), 0) if known else 0
    if us.denominator != 1 or not 0 < us <= MAX_PERIOD_US:
        return "; the period multiple must be whole"
    written, seconds = f"{limit}/{format_period(int(us))}", int(us) / _SECOND_US
    return f"; the period multiple must be whole: write {written}, or Rate({limit}, {seconds!r})"


def _whole(text: str, what: str, digits: str) -> int:
    """Decimal digits (any script) as an int; refuses numbers no rate could use. Leading
    zeros are dropped first (``"007"`` is 7); past 20 significant digits a number exceeds
    every limit and period a Rate accepts, and ``int()`` itself refuses past 4,300."""
    start = 0
    while start < len(digits) - 1 and unicodedata.decimal(digits[start]) == 0:
        start += 1
    significant = digits[start:]
    if len(significant) > _MAX_DIGITS:
        raise ConfigurationError(
            f"rate {shown(text)}: {what} has {len(significant)} digits; "
            f"the most a rate can use is {_MAX_DIGITS}"
        )
    return int(significant)


def _positive_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"Rate {what} {shown(value)} must be a whole number")
    if value <= 0:
        raise ConfigurationError(f"Rate {what} {shown(value)} must be at least 1")
    return value


P = ParamSpec("P")
T = TypeVar("T")


def _refusing_bad_arguments(function: Callable[P, T]) -> Callable[P, T]:
    """``function`` (Rate's ``__init__`` or ``parse``) refusing unknown keywords and extra
    positional arguments as ``checks.keywords_checked`` does (checks imports this module).
    They are looked at only when the call fails: a good call pays for the wrapper's call
    alone, about 0.13 us of Rate(10, 1)'s 1.5 us (checking first, 0.19)."""
    owner = "Rate" if function.__name__ == "__init__" else f"Rate.{function.__name__}"
    takes = tuple(inspect.signature(function).parameters)[1:]  # less self or cls

    @functools.wraps(function)
    def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        except TypeError:
            unknown = sorted(set(kwargs).difference(takes))
            if unknown:
                close = [m for name in unknown for m in difflib.get_close_matches(name, takes, 1)]
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise ConfigurationError(
                    f"{owner}: unknown keyword{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))}; it takes {', '.join(takes)}{hint}"
                ) from None
            if len(args) > len(takes) + 1:
                raise ConfigurationError(
                    f"{owner}: {len(args) - 1} positional arguments given, but it takes at most "
                    f"{len(takes)} ({', '.join(takes)})"
                ) from None
            raise

    return checked


@dataclass(frozen=True, slots=True, init=False)
class Rate:
    """``limit`` requests per ``period``, with ``burst`` back to back from rest."""

    limit: int
    period_us: int
    burst: int | None = None
    _gcd: int = field(default=1, repr=False, compare=False)
    # Made once: rates key dicts on hot paths (two-tier leases, caches), and the generated
    # __hash__ hashed a new tuple of the fields on every lookup.
    _hash: int = field(default=0, repr=False, compare=False)

    @_refusing_bad_arguments
    def __init__(
        self, limit: int, period: timedelta | float | int, burst: int | None = None
    ) -> None:
        limit = _positive_int("limit", limit)
        period_us = _period_us(period)
        if burst is not None:
            burst = _positive_int("burst", burst)
        if period_us > MAX_PERIOD_US:
            raise _too_long(limit, period_us, burst)
        gcd = math.gcd(limit, period_us)
        capacity = limit if burst is None else burst
        if not _fits(limit, period_us, capacity, gcd):
            raise _too_fine(limit, period_us, burst, gcd)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "period_us", period_us)
        object.__setattr__(self, "burst", burst)
        object.__setattr__(self, "_gcd", gcd)
        object.__setattr__(self, "_hash", hash((limit, period_us, burst)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    @_refusing_bad_arguments
    def parse(cls, text: str, burst: int | None = None) -> Rate:
        """Parse ``"100/minute"``, ``"100/5m"``, ``"10 per second"``; see the module docstring."""
        if not isinstance(text, str):
            raise ConfigurationError(f"rate {shown(text)} must be a string such as '100/minute'")
        match = _PATTERN.match(text)
        if match is None or "." in (match["mult"] or ""):
            raise ConfigurationError(
                f"rate {shown(text)} is not LIMIT/UNIT: write it like '100/minute' or "
                f"'100/5m'{'' if match is None else _fraction_hint(match)}"
            )
        raw_limit, raw_mult, raw_unit = match.group("limit", "mult", "unit")
        if not raw_limit.isdecimal():
            raise ConfigurationError(
                f"rate {shown(text)}: limit {shown(raw_limit)} must be a whole number of requests, "
                "1 or more"
            )
        unit_us = UNITS.get(raw_unit.lower())
        if unit_us is None:
            raise ConfigurationError(
                f"rate {shown(text)}: unknown unit {shown(raw_unit)}; use one of us, ms, s, m, h, "
                "d, w, mo, y (or microsecond, millisecond, second, minute, hour, day, week, month, "
                "year)"
            )
        mult = 1 if raw_mult is None else _whole(text, "the period multiple", raw_mult)
        if mult == 0:
            raise ConfigurationError(f"rate {shown(text)}: the period multiple must be at least 1")
        limit = _whole(text, "limit", raw_limit)
        if limit == 0:
            raise ConfigurationError(f"rate {shown(text)}: limit must be at least 1")
        if unit_us * mult > MAX_PERIOD_US:  # and maybe past what a timedelta holds
            raise _too_long(limit, unit_us * mult, burst)
        return cls(limit, timedelta(microseconds=unit_us * mult), burst)

    @classmethod
    def parse_many(cls, text: str | Iterable[str]) -> tuple[Rate, ...]:
        """Parse several rates: ``"10/second; 1000/hour"`` (``;`` or ``,``) or a list of strings."""
        parts = re.split(r"[;,]", text) if isinstance(text, str) else list(text)
        rates = tuple(cls.parse(part) for part in parts if part.strip())
        if not rates:
            raise ConfigurationError(f"rates {shown(text)}: no rate given")
        return rates

    @property
    def period(self) -> timedelta:
        return timedelta(microseconds=self.period_us)

    @property
    def period_seconds(self) -> float:
        return self.period_us / _SECOND_US

    @property
    def capacity(self) -> int:
        """Requests a rested key admits back to back: ``burst``, or ``limit`` when unset."""
        return self.limit if self.burst is None else self.burst

    @property
    def reduced(self) -> tuple[int, int]:
        """``(n, d)`` with ``d / n`` the emission interval in microseconds, in lowest terms."""
        return self.limit // self._gcd, self.period_us // self._gcd

    @property
    def emission_interval(self) -> float:
        """Seconds between requests at the steady rate (``period / limit``)."""
        return self.period_us / self.limit / _SECOND_US

    def __str__(self) -> str:
        text = f"{self.limit}/{format_period(self.period_us)}"
        return text if self.burst is None else f"{text} (burst {self.burst})"


#: The longest period, and why, as errors say it.
_LONGEST = "100 years (36,500 days)"
_WHY_LONGEST = "a state holds instants up to a period ahead of now, and a Redis number is "
_WHY_LONGEST += "exact only below 2**53 microseconds from the epoch, about 230 years from today"


def _fits(limit: int, period_us: int, capacity: int, gcd: int) -> bool:
    """Whether the exact state stays below 2**53, and a bucket refills from empty within
    ``MAX_PERIOD_US`` (the period itself is at most that)."""
    return (
        capacity * (period_us // gcd) + limit < _EXACT
        and capacity * period_us <= MAX_PERIOD_US * limit
    )


def _rate_shown(limit: int, period_us: int, burst: int | None) -> str:
    """The rate as written, for an error: its period in its largest whole unit."""
    period = format_period(period_us, words=True)
    if period_us >= 10**20:  # a period of 1e300 seconds, said in 300 digits, says nothing
        period = f"{period_us / UNITS['year']:.3g} years"
    return f"{limit} per {period}" + ("" if burst is None else f" with burst {burst}")


def _too_long(limit: int, period_us: int, burst: int | None) -> ConfigurationError:
    """The error of a period past ``MAX_PERIOD_US``."""
    return ConfigurationError(
        f"Rate {_rate_shown(limit, period_us, burst)} has a period too long to count exactly "
        f"({_WHY_LONGEST}); use a period of at most {_LONGEST}"
    )


def _too_fine(limit: int, period_us: int, burst: int | None, gcd: int) -> ConfigurationError:
    """The error of a rate that does not ``_fits``: the rate as written (its period in its
    largest whole unit), and each change that would make it fit. A smaller burst is offered
    only when a burst was given (the window algorithms take none)."""
    capacity = limit if burst is None else burst
    shown, ways = _rate_shown(limit, period_us, burst), []
    if burst is not None:
        most = min((_EXACT - 1 - limit) // (period_us // gcd), MAX_PERIOD_US * limit // period_us)
        if most >= 1:
            ways.append(f"a burst of at most {most:,}")
    near = _dividing_limits(limit, period_us, burst)
    if near:
        ways.append(f"a limit that divides the period evenly ({' or '.join(near)}, say)")
    # Any limit up to this one counts exactly over this period, whatever its factors.
    any_limit = (_EXACT - 1) // (period_us + 1)
    if burst is None and 1 <= any_limit < limit:
        ways.append(f"a limit of at most {any_limit:,} (any limit up to it fits this period)")
    # With any limit, a period this short keeps the state under 2**53 and refills in time.
    longest = min((_EXACT - 1 - limit) // capacity, MAX_PERIOD_US * limit // capacity)
    if longest >= 1:
        ways.append(f"a period of at most {_floor_period(longest, period_us)}")
    ways = ways or ["a smaller limit"]
    advice = ways[0] if len(ways) == 1 else f"{', '.join(ways[:-1])}, or {ways[-1]}"
    why = "is too fine-grained to count exactly (its state would pass 2**53, past which a "
    why += "Redis number is not exact)"
    if capacity * (period_us // gcd) + limit < _EXACT:  # it fits 2**53, but refills too slowly
        why = f"takes {capacity * period_us / limit / UNITS['year']:,.0f} years to refill from "
        why += f"empty (burst x period / limit), more than {_LONGEST} ({_WHY_LONGEST})"
    return ConfigurationError(f"Rate {shown} {why}; use {advice}")


def _dividing_limits(limit: int, period_us: int, burst: int | None) -> list[str]:
    """The nearest limits below and above ``limit`` (within a tenth of it or 1, and 10,000;
    none for a limit of 1) that divide ``period_us`` evenly and count exactly with this
    burst: a limit much further off would be another rate (17 for 1 is 17 times it)."""
    found: list[str] = []
    reach = 0 if limit == 1 else min(max(1, limit // 10), 10_000)  # 2 for 1: twice the rate
    for step in (-1, 1):
        for other in range(limit + step, limit + step * (reach + 1), step):
            if other < 1 or other > period_us:
                break
            if period_us % other == 0 and _fits(other, period_us, burst or other, other):
                found.append(f"{other:,}")
                break
    return found


#: The units a period is written in, longest first, with their short names.
_UNITS_SHORT = {"year": "y", "month": "mo", "week": "w", "day": "d", "hour": "h", "minute": "m"}
_UNITS_SHORT.update(second="s", ms="ms")


def _floor_period(period_us: int, like_us: int) -> str:
    """``period_us`` rounded down to a whole number of the unit ``like_us`` is written in
    (or of the largest smaller unit it holds one of), for people: ``"14,892 days"``."""
    names = list(_UNITS_SHORT)
    start = next((i for i, name in enumerate(names) if like_us % UNITS[name] == 0), len(names))
    for name in names[start:]:
        count = period_us // UNITS[name]
        if count >= 1:
            noun = "millisecond" if name == "ms" else name
            return f"{count:,} {noun}" + ("s" if count > 1 else "")
    return f"{period_us:,} microsecond" + ("s" if period_us > 1 else "")


def format_period(period_us: int, *, words: bool = False) -> str:
    """A period in its largest whole unit: ``"minute"``, ``"5m"`` as ``str(rate)`` writes
    it (and ``Rate.parse`` reads it back), or for people, ``words=True``: ``"minute"``,
    ``"5 minutes"``, so that ``f"1000 per {format_period(us, words=True)}"`` reads
    "1000 per 5 minutes" (which ``Rate.parse`` reads too).
    """
    for name, short in _UNITS_SHORT.items():
        unit = UNITS[name]
        if period_us % unit == 0:
            mult = period_us // unit
            if words:
                noun = "millisecond" if name == "ms" else name
                return noun if mult == 1 else f"{mult} {noun}s"
            return name if mult == 1 else f"{mult}{short}"
    if not words:
        return f"{period_us}us"
    return "microsecond" if period_us == 1 else f"{period_us} microseconds"
