"""Pure arithmetic for the strategies: allowance splits and the over-admission bound.

Nothing here does I/O; the strategies and ``python -m ratewarden.regions``
call these, and the tests check them without a store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions._gcounter import check_region

__all__ = ["overshoot_bound", "parse_region_rate", "split_allowances", "traffic_weights"]

_SECOND_US = 1_000_000


#: The longest sync interval, replication lag or silence taken, in seconds: a day.
_MAX_SECONDS = 86_400


def _seconds_us(what: str, seconds: object, *, zero_ok: bool) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(f"{what} {seconds!r} must be a number of seconds")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
        least = ">= 0" if zero_ok else "> 0"
        raise ConfigurationError(f"{what} {seconds!r} must be a finite number of seconds {least}")
    if seconds > _MAX_SECONDS:
        raise ConfigurationError(
            f"{what} {seconds!r} is more than a day ({_MAX_SECONDS:,} s): regions that sync "
            "that seldom have no bound worth stating (check the unit: seconds)"
        )
    return math.ceil(seconds * _SECOND_US)


def parse_region_rate(text: str, flag: str = "--region") -> tuple[str, Rate]:
    """``NAME=RATE[:BURST]`` (``us=100/s``, ``eu=50/s:5``) as a region and its rate cap, as
    the command lines take them; a ConfigurationError naming ``flag`` and ``text`` if not."""
    name, sep, spec = text.partition("=")
    if not sep or not name:
        raise ConfigurationError(f"{flag} {text!r} must be NAME=RATE, such as us=100/s")
    rate_text, _, burst = spec.partition(":")
    if burst and not (burst.isascii() and burst.isdecimal() and int(burst) >= 1):
        raise ConfigurationError(f"{flag} {text!r}: burst {burst!r} must be a whole number >= 1")
    try:
        return check_region(name), Rate.parse(rate_text, int(burst) if burst else None)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{flag} {text!r}: {exc}") from None


def check_weights(weights: Mapping[str, int | float]) -> dict[str, Fraction]:
    """Validated weights as exact fractions: finite, >= 0, at least one above zero."""
    if not isinstance(weights, Mapping) or not weights:
        raise ConfigurationError(f"region weights {weights!r} must be a non-empty mapping")
    exact: dict[str, Fraction] = {}
    for region, weight in weights.items():
        check_region(region)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ConfigurationError(
                f"weight {weight!r} of region {region!r} must be a finite number >= 0"
            )
        exact[region] = Fraction(weight)
    if sum(exact.values()) == 0:
        raise ConfigurationError(f"region weights {dict(weights)!r}: at least one must be above 0")
    return exact


def split_allowances(limit: int, weights: Mapping[str, int | float]) -> dict[str, int]:
    """``limit`` split in proportion to ``weights``; the allowances sum to exactly ``limit``.

    Each region gets the whole part of its exact share; the requests left over
    go one each to the largest fractional parts (ties to the earlier region in
    ``weights``), so the sum never exceeds ``limit`` and no region is more than
    one request from its exact share.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit {limit!r} to split must be a whole number >= 0")
    exact = check_weights(weights)
    total = sum(exact.values())
    shares = {region: limit * weight / total for region, weight in exact.items()}
    allowances = {region: math.floor(share) for region, share in shares.items()}
    left = limit - sum(allowances.values())
    order = sorted(shares, key=lambda r: allowances[r] - shares[r])  # largest remainder first
    for region in order[:left]:
        allowances[region] += 1
    return allowances


def traffic_weights(demand: Mapping[str, int], regions: tuple[str, ...]) -> dict[str, int]:
    """Weights from each region's demand in the last interval, with a floor for quiet regions.

    A region's weight is its demand plus a tenth of the mean demand (at least
    1), so a region that saw no traffic keeps a small allowance and is not
    locked out for a whole interval when traffic moves to it.
    """
    if not regions:
        raise ConfigurationError(
            f"traffic_weights: regions {regions!r} must name at least one region"
        )
    if not isinstance(demand, Mapping):
        raise ConfigurationError(
            f"traffic_weights: demand {demand!r} must map each region to its demand"
        )
    for region, count in demand.items():
        if region not in regions:
            raise ConfigurationError(f"demand names region {region!r}; known regions: {regions}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"demand {count!r} of region {region!r} must be >= 0")
    floor = max(1, sum(demand.values()) // (10 * len(regions)))
    return {region: demand.get(region, 0) + floor for region in regions}


def overshoot_bound(
    region_rates: Mapping[str, Rate], sync_interval: float, replication_lag: float
) -> int:
    """Requests a reconciled global limit may admit past the limit, in one window, at most.

    For every region ``r`` capped at ``region_rates[r]``: the most it can admit
    in ``sync_interval + replication_lag`` seconds, which is its burst plus its
    rate times that staleness, rounded up. Summed over the regions::

        bound = sum_r ( burst_r + ceil(rate_r * (sync_interval + replication_lag)) )

    With ``burst=1`` on each region rate this is the plain
    ``sum_r rate_r * (sync_interval + replication_lag)`` plus one per region.
    """
    if not isinstance(region_rates, Mapping) or not region_rates:
        raise ConfigurationError(f"region rates {region_rates!r} must be a non-empty mapping")
    staleness_us = _seconds_us("sync_interval", sync_interval, zero_ok=False) + _seconds_us(
        "replication_lag", replication_lag, zero_ok=True
    )
    bound = 0
    for region, rate in region_rates.items():
        check_region(region)
        if not isinstance(rate, Rate):
            raise ConfigurationError(f"rate of region {region!r} must be a Rate, not {rate!r}")
        bound += rate.capacity + -(-staleness_us * rate.limit // rate.period_us)
    return bound
