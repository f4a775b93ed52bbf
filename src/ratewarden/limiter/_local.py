"""The local bucket's rates: a fraction of the global rates, or fixed rates of their own.

``local=0.25`` gives each process a quarter of every global rate (limit and
burst scaled, rounded down, never below 1; the period kept). ``local=1.0``
lets one process alone use a key's whole quota before the store is asked.
``local=Rate.parse("50/second")`` (or a list) applies the same rates to every
key, whatever its global rates. ``None`` turns the local bucket off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import timedelta
from fractions import Fraction

from ratewarden.checks import check_rates
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

__all__ = ["LocalRates", "local_rates", "scaled"]

#: What ``local=`` accepts.
LocalRates = float | Rate | Sequence[Rate] | None

# Scaled rates per global rates; cleared when full (a miss costs one scaling).
_CACHE_SIZE = 1024


def scaled(rate: Rate, fraction: Fraction) -> Rate:
    """``rate`` with its limit and burst times ``fraction``, rounded down, at least 1."""
    limit = max(1, math.floor(rate.limit * fraction))
    burst = None if rate.burst is None else max(1, math.floor(rate.burst * fraction))
    return Rate(limit, timedelta(microseconds=rate.period_us), burst)


def local_rates(local: LocalRates) -> Callable[[tuple[Rate, ...]], tuple[Rate, ...]] | None:
    """A function from a key's global rates to its local bucket's rates; None when off."""
    if local is None:
        return None
    if isinstance(local, bool):
        raise ConfigurationError(f"local {local!r} must be a fraction, a Rate, a list, or None")
    if isinstance(local, int | float):
        if not 0 < local <= 1:
            raise ConfigurationError(
                f"local fraction {local!r} must be above 0 and at most 1 "
                "(1.0 = the global rate per process, 0.1 = a tenth of it)"
            )
        return _Fractional(Fraction(local).limit_denominator(1_000_000))
    fixed = check_rates(local)
    return lambda _rates: fixed


class _Fractional:
    """Global rates -> scaled local rates, memoised."""

    __slots__ = ("_cache", "fraction")

    def __init__(self, fraction: Fraction) -> None:
        self.fraction = fraction
        self._cache: dict[tuple[Rate, ...], tuple[Rate, ...]] = {}

    def __call__(self, rates: tuple[Rate, ...]) -> tuple[Rate, ...]:
        found = self._cache.get(rates)
        if found is None:
            found = tuple(scaled(rate, self.fraction) for rate in rates)
            if len(set(found)) != len(found):
                # Two rates can scale to the same one (1/s and 2/2s at 0.5): keep one of each.
                found = tuple(dict.fromkeys(found))
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[rates] = found
        return found
