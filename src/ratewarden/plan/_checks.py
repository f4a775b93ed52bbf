"""The plan's checks: each input's range, and the ceiling on every number it takes or prints."""

from __future__ import annotations

import math
from collections.abc import Callable

from ratewarden.errors import ConfigurationError

__all__ = ["MAX_NUMBER", "MAX_TEXT", "FigureTooLargeError", "bounded", "positive", "share", "whole"]

#: The largest number the plan takes or prints: a quadrillion requests, keys, bytes or
#: milliseconds is past any deployment, and below it every figure is finite and readable.
MAX_NUMBER = 10**15
MAX_TEXT = "10^15"


class FigureTooLargeError(ConfigurationError):
    """A figure that would pass ``MAX_NUMBER`` (or is not a number): ``fields`` are the inputs
    it is computed from that can make it so, for the command line to name by their flags."""

    def __init__(self, figure: str, fields: tuple[str, ...]) -> None:
        self.figure = figure
        self.fields = fields
        super().__init__(self.said(str))

    def said(self, name: Callable[[str], str]) -> str:
        """The message, each field named by ``name`` (a flag on the command line)."""
        return (
            f"{self.figure} would be more than {MAX_TEXT}, the plan's ceiling: check "
            f"{', '.join(name(field) for field in self.fields)}"
        )


def bounded(value: float, figure: str, fields: tuple[str, ...]) -> float:
    """``value``, or ``FigureTooLargeError`` when it is past ``MAX_NUMBER``, infinite or NaN."""
    if not value <= MAX_NUMBER:  # NaN compares false
        raise FigureTooLargeError(figure, fields)
    return value


def positive(name: str, value: object, zero_ok: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 <= value <= MAX_NUMBER or (value == 0 and not zero_ok):  # type: ignore[operator]
        low = "0 or more" if zero_ok else "above 0"
        raise ConfigurationError(
            f"{name} {value!r} must be a finite number {low}, at most {MAX_TEXT}"
        )


def share(name: str, value: object, upper_open: bool = False, lower_open: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    top_ok = ok and (value < 1 if upper_open else value <= 1)  # type: ignore[operator]
    low_ok = ok and (value > 0 if lower_open else value >= 0)  # type: ignore[operator]
    if not ok or not top_ok or not low_ok:
        low = "above 0" if lower_open else "from 0"
        bound = "below 1" if upper_open else "at most 1"
        raise ConfigurationError(f"{name} {value!r} must be a share {low} to {bound} (or a %)")


def whole(name: str, value: object, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_NUMBER:
        raise ConfigurationError(
            f"{name} {value!r} must be a whole number >= {minimum}, at most {MAX_TEXT}"
        )
