"""How the plan writes its numbers, so that each formula evaluates to the figure it explains."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

__all__ = ["as_bytes", "count", "exact", "utilization"]


def count(value: float) -> str:
    """A count with thousands separators, to 3 significant figures past the point."""
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.3g}"


def exact(value: float) -> str:
    """A number as given, with thousands separators (12 significant figures: past them a float's
    arithmetic is noise), for the operands of a formula whose figure is rounded up."""
    if value == int(value) and abs(value) <= 1e15:
        return f"{int(value):,}"
    return f"{value:,.12g}"


def as_bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def utilization(value: float) -> tuple[str, str]:
    """``value`` (rho) as the utilization row's percent and as the fraction in the latency's
    formula, from one rounding: three significant figures of ``1 - rho``, so a whole percent
    up to 90% and more places nearer 1 (``0.999400``, ``99.940%``)."""
    gap = 1 - value
    places = 3 if not 0 < gap < 0.1 else 2 - math.floor(math.log10(gap))
    fraction = Decimal(f"{value:.{places}f}")
    percent = (fraction * 100).quantize(Decimal(1).scaleb(3 - places), rounding=ROUND_HALF_UP)
    return f"{percent:,}%", str(fraction)
