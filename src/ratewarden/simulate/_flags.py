"""``ratewarden simulate``'s number flags: each converter (argparse's ``type=``) refuses a bad
value naming the flag, the value as written and the range. Whole numbers are
``argparsing.whole``'s, read as ``ratewarden plan`` reads them (``1e3`` is 1,000)."""

from __future__ import annotations

import argparse
import math

from ratewarden.simulate.accuracy import MAX_LOAD
from ratewarden.simulate.runner import MAX_DURATION_S

__all__ = ["duration", "load"]


def _float(flag: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} {raw!r} is not a number") from None


def load(raw: str) -> float:
    """``--load``: a multiple of the limit, above 0 and at most ``MAX_LOAD``."""
    value = _float("--load", raw)
    if not 0 < value <= MAX_LOAD:  # NaN and inf too
        raise argparse.ArgumentTypeError(
            f"--load {raw!r} must be a number above 0, at most {MAX_LOAD:,}"
        )
    return value


def duration(raw: str) -> float:
    """``--duration``: seconds, from the simulation's 1 us tick to ``MAX_DURATION_S``."""
    value = _float("--duration", raw)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"--duration {raw!r} must be a number above 0")
    if not 1 <= round(value * 1_000_000) <= MAX_DURATION_S * 1_000_000:
        raise argparse.ArgumentTypeError(
            f"--duration {raw!r} must be from 0.000001 s (1 us, the simulation's tick) to "
            f"{MAX_DURATION_S:,} s (30 days)"
        )
    return value
