"""How much a ``simulate --region`` run may do, checked before it makes anything.

A region run decides every region's arrivals on that region's budget, and every round
of every region reads each peer's count of every region: the arrivals grow with the
regions, and a round's work with regions x peers x regions. ``check_run`` refuses a run
past any of the limits below with one line naming the limit, before a store or an
arrival is made (a run is a picture, not a load test).

Measured in CPython on one core (6 December): a decision takes about 25 us; a region's
round about 80 us plus 1.1 us per count it reads for a ``ReconciledBudget``, and ten
times that for a ``RegionalQuota`` rebalanced from traffic.
"""

from __future__ import annotations

from collections.abc import Mapping

from ratewarden.errors import ConfigurationError
from ratewarden.simulate._pattern import MAX_ARRIVALS, SECOND_US, Horizon, Pattern

__all__ = ["MAX_COUNTS_READ", "MAX_REGION_ROUNDS", "MAX_REGIONS", "check_run"]

#: The most regions one run may hold.
MAX_REGIONS = 100

#: The most rounds one run may hold, every region's added up (regions x rounds each).
MAX_REGION_ROUNDS = 200_000

#: The most peer counts the rounds of one run may read, by strategy: each round of each
#: region reads every peer's count of every region (a quota's exchange reads its own store
#: too); a static quota's rounds read nothing.
MAX_COUNTS_READ = {"reconciled": 20_000_000, "quota": 2_000_000}


def check_run(
    patterns: Mapping[str, Pattern],
    horizon: Horizon,
    interval_us: int,
    strategy: str,
) -> None:
    """Refuse a run over ``horizon`` of ``patterns`` (one a region), with a round every
    ``interval_us`` in each region, that would pass a limit; return without making
    anything otherwise."""
    regions = len(patterns)
    seconds = f"{horizon.duration_us / SECOND_US:g} s"
    if regions > MAX_REGIONS:
        raise ConfigurationError(
            f"{regions} regions is more than {MAX_REGIONS} in one run; simulate fewer regions"
        )
    volumes = {name: pattern.volume(horizon) for name, pattern in patterns.items()}
    total = sum(volumes.values())
    if total > MAX_ARRIVALS:
        busiest = max(volumes, key=lambda name: volumes[name])
        raise ConfigurationError(
            f"about {total:,.0f} requests in {seconds} over {regions} regions "
            f"({busiest} {volumes[busiest]:,.0f}) is more than {MAX_ARRIVALS:,} in one run; "
            "shorten --duration or lower the loads"
        )
    if interval_us < 1:
        raise ConfigurationError(
            "a sync interval under a microsecond (the simulation's step) gives unbounded rounds "
            f"in {seconds}; lengthen --sync-interval"
        )
    rounds = horizon.duration_us // interval_us * regions
    every = f"one every {interval_us / SECOND_US:g} s in each of {regions} regions"
    if rounds > MAX_REGION_ROUNDS:
        raise ConfigurationError(
            f"{rounds:,} rounds in {seconds} ({every}) is more than {MAX_REGION_ROUNDS:,} in "
            "one run; lengthen --sync-interval or shorten --duration"
        )
    most = MAX_COUNTS_READ.get(strategy)
    stores = regions if strategy == "quota" else regions - 1
    counts = rounds * stores * regions
    if most is not None and counts > most:
        raise ConfigurationError(
            f"{rounds:,} rounds in {seconds} ({every}), each reading {stores} stores' counts "
            f"of {regions} regions, would read {counts:,} counts: more than {most:,} with "
            f"--strategy {strategy}; simulate fewer regions, lengthen --sync-interval or "
            "shorten --duration"
        )
