"""``ratewarden plan``'s flag values: each converter (argparse's ``type=``) refuses a bad value
naming the flag and the value as written. Whole numbers are ``argparsing.whole``'s, read as
every command reads them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ratewarden.errors import ConfigurationError
from ratewarden.plan._checks import MAX_NUMBER, MAX_TEXT
from ratewarden.rate import Rate
from ratewarden.regions import parse_region_rate

__all__ = ["DAY_MS", "number", "region", "share", "within_a_day"]

#: The longest sync interval or lag a ReconciledBudget takes, in milliseconds: a day.
DAY_MS = 86_400_000


def number(flag: str, zero_ok: bool = False) -> Callable[[str], float]:
    def convert(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} is not a number") from None
        if not 0 <= value <= MAX_NUMBER or (value == 0 and not zero_ok):  # NaN too
            low = "0 or more" if zero_ok else "above 0"
            raise argparse.ArgumentTypeError(
                f"{flag} {raw!r} must be a number {low}, at most {MAX_TEXT}"
            )
        return value

    return convert


def share(flag: str, above_zero: bool = False, below_one: bool = False) -> argparse._ActionType:
    """A share, 0.1 or 10%; ``above_zero`` is --max-utilization's: above 0 and below 1, since at
    1 (rho = 1) the M/M/1 latency of the primaries sized for it has no bound."""
    if above_zero:
        said = "above 0 and below 1 (or above 0% and below 100%)"
    else:
        said = f"from 0 to {'below ' * below_one}1 (or 0% to {'below ' * below_one}100%)"
    why = ": at 100% a primary's queue grows without bound" if above_zero else ""

    def convert(raw: str) -> float:
        text = raw.strip()
        scale = 100.0 if text.endswith("%") else 1.0
        try:
            value = float(text.removesuffix("%")) / scale
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} is not a share") from None
        if above_zero and value == 0:
            raise argparse.ArgumentTypeError(
                f"{flag} {raw!r} leaves nothing to use: give a share {said}"
            )
        if not 0 <= value <= 1 or ((below_one or above_zero) and value == 1):  # NaN too
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} must be {said}{why}")
        return value

    return convert


def region(flag: str) -> argparse._ActionType:
    def convert(raw: str) -> tuple[str, Rate]:
        try:
            return parse_region_rate(raw, flag)
        except ConfigurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def within_a_day(flag: str, zero_ok: bool = False) -> argparse._ActionType:
    """Milliseconds of a regions flag: a number (0 too with ``zero_ok``) up to ``DAY_MS``, what a
    ReconciledBudget takes; a longer one is a unit mistake, said as written."""
    convert_number = number(flag, zero_ok)

    def convert(raw: str) -> float:
        value = convert_number(raw)
        if value > DAY_MS:
            raise argparse.ArgumentTypeError(
                f"{flag} {raw!r} is more than a day ({DAY_MS:,} ms), the most a "
                "ReconciledBudget takes; check the unit (milliseconds)"
            )
        return value

    return convert
