"""Multi-region budgets in simulated time: how far over the limit a configuration goes.

``run_regions`` puts one ``ReconciledBudget`` in each region (or, with ``strategy``, a
``RegionalQuota``: ``_fleets``), each on its own in-process region store
(``MemoryRegionStore``: "that region's Redis"), all on one ``ManualClock``. Each region's
traffic pattern is decided by its own budget, on one key, as ``ratewarden.regions``
decides it in production. Every ``sync_interval`` seconds each region fetches its peers'
counts, and applies them ``round_time`` seconds later (by default ``replication_lag``, the
longest a round may take and still be used), so the counts it merges are that old; a
round slower than the lag is stale, and merges counts without moving the cap. The run
then counts, per window of the global rate, what all the regions admitted together: how
far that went over the limit, against the bound the budgets state
(``ReconciledBudget.bound``).

This module builds stores, so it is one of the composition roots
(docs/ARCHITECTURE.md): a simulation is a whole system in one process.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate._fleets import STRATEGIES, QuotaFleet, ReconciledFleet
from ratewarden.simulate._partitions import CutLink, Partition, quiet
from ratewarden.simulate._pattern import MAX_ARRIVALS, Horizon, Pattern
from ratewarden.simulate._region_limits import check_run
from ratewarden.simulate._table import aligned
from ratewarden.simulate.runner import START_US, _us, check_duration
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.memory_regions import MemoryRegionStore
from ratewarden.testing import ManualClock

__all__ = ["RegionRow", "RegionsRun", "WindowRow", "format_regions", "run_regions"]

#: Event kinds, in the order they run when they fall on the same microsecond: a round's
#: fetch, then the apply of an earlier one, then requests.
_FETCH, _APPLY, _ARRIVAL = 0, 1, 2


@dataclass(frozen=True, slots=True)
class RegionRow:
    """One region's totals."""

    region: str
    pattern: str
    rate: Rate
    offered: int
    admitted: int
    denied: int
    #: Rounds that could not read every peer (``SyncReport.failed``): the cap stayed as it was.
    failed_rounds: int = 0
    #: Rounds slower than the replication lag (``SyncReport.stale``): the cap stayed too.
    stale_rounds: int = 0
    #: Rounds the region started (the regions' rounds are staggered: one may start one more).
    rounds: int = 0


@dataclass(frozen=True, slots=True)
class WindowRow:
    """One window of the global rate: what each region admitted in it, in region order."""

    start_us: int
    admitted: tuple[int, ...]
    #: Whether a partition cut a link at some time in the window.
    cut: bool = False

    @property
    def total(self) -> int:
        """What all regions admitted in the window."""
        return sum(self.admitted)


@dataclass(frozen=True, slots=True)
class RegionsRun:
    """A whole simulation: the configuration, each region's totals, every window."""

    rate: Rate
    sync_interval: float
    replication_lag: float
    bound: int
    regions: tuple[RegionRow, ...]
    windows: tuple[WindowRow, ...]
    rounds: int
    partitions: tuple[Partition, ...] = ()
    #: Seconds from a round's fetch to its apply (``replication_lag`` unless given).
    round_time: float | None = None
    #: What every region ran (``_fleets.STRATEGIES``).
    strategy: str = "reconciled"

    def over(self, window: WindowRow) -> int:
        """How far ``window`` went over the global limit (0 when within it)."""
        return max(0, window.total - self.rate.limit)

    @property
    def worst(self) -> WindowRow | None:
        """The window that went furthest over the limit (the first of equals), if any did."""
        found = max(self.windows, key=self.over, default=None)
        return found if found is not None and self.over(found) > 0 else None


def run_regions(
    region_rates: Mapping[str, Rate],
    rate: Rate,
    patterns: Mapping[str, Pattern],
    *,
    sync_interval: float,
    replication_lag: float,
    duration_s: float,
    partitions: Sequence[Partition] = (),
    round_time: float | None = None,
    strategy: str = "reconciled",
) -> RegionsRun:
    """Offer each region its pattern for ``duration_s`` seconds under the global ``rate``.

    ``region_rates`` caps each region's admissions (as ``ReconciledBudget`` takes them);
    ``patterns`` gives every region its traffic, whose loads are multiples of ``rate``;
    ``partitions`` cut links between regions for a while (``_partitions.parse_partition``);
    ``round_time`` is how long a round takes from fetch to apply (``replication_lag`` when
    None): longer than the lag, every round is stale. ``strategy`` is what every region
    runs: ``reconciled`` (a ``ReconciledBudget``), ``quota`` (a ``RegionalQuota`` whose shares
    follow traffic, a rebalance round every ``sync_interval``) or ``static`` (its shares
    fixed); the shares of both quotas start from the region rates.
    """
    if strategy not in STRATEGIES:
        raise ConfigurationError(f"strategy {strategy!r} must be one of {', '.join(STRATEGIES)}")
    if strategy != "reconciled" and round_time is not None:
        raise ConfigurationError(
            f"a round time is for reconciled budgets: a {strategy} round is whole when it starts"
        )
    if set(patterns) != set(region_rates):
        raise ConfigurationError(
            f"traffic is given for {sorted(patterns)}, but the regions are "
            f"{sorted(region_rates)}: give every region a pattern"
        )
    duration_us = check_duration(duration_s)
    names = tuple(region_rates)
    # The run starts on a window edge of the global rate, so its windows are whole.
    start_us = -(-START_US // rate.period_us) * rate.period_us
    horizon = Horizon(start_us, duration_us, rate.limit, rate.period_us)
    interval_us = _us(sync_interval)
    check_run({name: patterns[name] for name in names}, horizon, interval_us, strategy)
    clock = ManualClock(start_us / 1_000_000)
    stores = {name: MemoryRegionStore(clock=clock) for name in names}

    def elapsed() -> int:
        return clock.now_us() - start_us

    def peers(name: str) -> dict[str, Any]:
        """The other regions' stores as ``name`` reaches them: through a cut link if any."""
        return {
            peer: CutLink(stores[peer], name, peer, partitions, elapsed) if partitions
            else stores[peer]
            for peer in names
            if peer != name
        }  # fmt: skip

    fleet: ReconciledFleet | QuotaFleet
    if strategy == "reconciled":
        fleet = ReconciledFleet(stores, peers, region_rates, sync_interval=sync_interval,
                                replication_lag=replication_lag)  # fmt: skip
    else:
        fleet = QuotaFleet(stores, peers, region_rates, traffic=strategy == "quota",
                           local_store=lambda: MemoryStore(clock=clock))  # fmt: skip
    lag_us = _us(replication_lag if round_time is None else round_time)
    streams = {name: patterns[name].start(horizon) for name in names}
    # (time, kind, seq, region index, client, cost); seq keeps equal times in order. Each
    # region's first arrivals are numbered from offsets[index] on, but only the next one of
    # each is queued (the rest wait in the stream's list, in time order): the queue stays as
    # small as the regions and the reactive clients.
    queue: list[tuple[int, int, int, int, int, int]] = []
    offsets: list[int] = []
    seq = 0
    for index, name in enumerate(names):
        offsets.append(seq)
        waiting = streams[name].arrivals
        if waiting:
            t, client, cost = waiting[0]
            queue.append((t, _ARRIVAL, seq, index, client, cost))
        seq += len(waiting)
    first_arrivals = seq
    # Each region's first round, spread over the first interval as regions that do not share
    # a clock would be; each round books the region's next one.
    for index in range(len(names)):
        queue.append((start_us + interval_us * (index + 1) // len(names), _FETCH, seq, index, 0, 0))
        seq += 1
    heapq.heapify(queue)
    rounds = 0
    views: dict[tuple[int, int], Any] = {}
    offered = dict.fromkeys(names, 0)
    admitted = dict.fromkeys(names, 0)
    failed = dict.fromkeys(names, 0)
    stale = dict.fromkeys(names, 0)
    started = dict.fromkeys(names, 0)
    windows: dict[int, list[int]] = {}
    decided = 0
    with quiet():
        while queue:
            t, kind, order, index, client, cost = heapq.heappop(queue)
            if t >= horizon.end_us:
                break
            clock.advance_us(t - clock.now_us())
            name = names[index]
            if kind == _FETCH:
                started[name] += 1
                fetched = fleet.fetch(name, started[name])
                if fleet.applies:
                    views[(t, index)] = fetched
                    heapq.heappush(queue, (t + lag_us, _APPLY, order, index, t, 0))
                else:
                    failed[name] += fetched
                heapq.heappush(queue, (t + interval_us, _FETCH, order, index, 0, 0))
                if index == len(names) - 1:
                    rounds += 1
                continue
            if kind == _APPLY:
                was_failed, was_stale = fleet.apply(name, views.pop((client, index)))
                failed[name] += was_failed
                stale[name] += was_stale
                continue
            if order < first_arrivals:  # one of the region's first arrivals: queue its next
                position = order - offsets[index] + 1
                waiting = streams[name].arrivals
                if position < len(waiting):
                    heapq.heappush(queue, (waiting[position][0], _ARRIVAL, order + 1, index,
                                           *waiting[position][1:]))  # fmt: skip
            decided += 1
            if decided > MAX_ARRIVALS:
                raise ConfigurationError(
                    f"more than {MAX_ARRIVALS:,} requests in {duration_s:g} s; "
                    "shorten the duration or lower the loads"
                )
            decision = fleet.hit(name, rate, cost)
            offered[name] += cost
            if decision.allowed:
                admitted[name] += cost
                counts = windows.setdefault(t // rate.period_us, [0] * len(names))
                counts[index] += cost
            following = streams[name].after((t, client, cost), decision.allowed,
                                            _us(decision.retry_after))  # fmt: skip
            if following is not None:
                heapq.heappush(queue, (following[0], _ARRIVAL, seq, index, *following[1:]))
                seq += 1
    first = start_us // rate.period_us
    last = (horizon.end_us - 1) // rate.period_us
    rows = tuple(
        RegionRow(name, patterns[name].describe(), region_rates[name], offered[name],
                  admitted[name], offered[name] - admitted[name], failed[name], stale[name],
                  started[name])
        for name in names
    )  # fmt: skip
    return RegionsRun(
        rate=rate,
        sync_interval=sync_interval,
        replication_lag=replication_lag,
        bound=fleet.bound,
        regions=rows,
        windows=tuple(
            WindowRow(
                (since := window * rate.period_us - start_us),
                tuple(windows.get(window, [0] * len(names))),
                any(p.overlaps(since, since + rate.period_us) for p in partitions),
            )
            for window in range(first, last + 1)
        ),
        rounds=rounds,
        partitions=tuple(partitions),
        round_time=round_time,
        strategy=strategy,
    )


#: The most windows the table lists one by one; a longer run lists its worst ones.
MAX_LISTED = 12


def format_regions(run: RegionsRun) -> str:
    """The run as text: each region's totals, the windows, and the overshoot against the bound."""
    cut = bool(run.partitions)
    slow = any(row.stale_rounds for row in run.regions)
    lines = [("region", "pattern", "region rate", "offered", "admitted", "denied")
             + (("rounds failed",) if cut else ())
             + (("rounds stale",) if slow else ())]  # fmt: skip
    for row in run.regions:
        lines.append((row.region, row.pattern, str(row.rate), str(row.offered),
                      str(row.admitted), str(row.denied))
                     + ((str(row.failed_rounds),) if cut else ())
                     + ((str(row.stale_rounds),) if slow else ()))  # fmt: skip
    out = [aligned(lines, left=2)]
    listed = list(run.windows)
    which = ""
    if len(listed) > MAX_LISTED:
        furthest = sorted(listed, key=run.over, reverse=True)[:MAX_LISTED]
        listed = sorted(furthest, key=lambda window: window.start_us)
        which = f", the {MAX_LISTED} furthest over the limit of {len(run.windows)}"
    names = [row.region for row in run.regions]
    table = [("window start", *names, "total", "over") + (("links",) if cut else ())]
    for window in listed:
        over = run.over(window)
        start = f"{window.start_us / 1_000_000:g}s"
        table.append(
            (start, *map(str, window.admitted), str(window.total), f"+{over}" if over else "0")
            + (("cut" if window.cut else "up",) if cut else ())
        )
    out.append(f"\nwindows of {run.rate} (limit {run.rate.limit}){which}:\n")
    out.append(aligned(table, left=1))
    worst = run.worst
    over_count = sum(1 for window in run.windows if run.over(window))
    verdict = (
        f"worst window +{run.over(worst)} over the limit, at {worst.start_us / 1_000_000:g}s"
        if worst is not None
        else "no window over the limit"
    )
    if run.strategy == "reconciled":
        stated = (
            f"the stated bound is +{run.bound} a window (sync every {run.sync_interval:g}s, "
            f"replication lag {run.replication_lag:g}s, {_rounds(run)})"
        )
    else:
        how = (
            f"from traffic, rebalanced every {run.sync_interval:g}s, {_rounds(run)}"
            if run.strategy == "quota"
            else "static"
        )
        stated = f"a regional quota's allowances add up to the limit (shares {how})"
    used = sum(window.total for window in run.windows)
    out.append(
        f"\n{verdict}; {over_count} of {len(run.windows)} windows over; {stated}\n"
        f"strategy {run.strategy}: {used:,} admitted in all, "
        f"{used / (run.rate.limit * len(run.windows)):.1%} of the limit over "
        f"{len(run.windows)} windows\n"
    )
    if slow:
        took = run.replication_lag if run.round_time is None else run.round_time
        out.append(
            f"rounds: each takes {took:g}s, more than the replication lag of "
            f"{run.replication_lag:g}s: a stale round merges counts but leaves the cap, so "
            "budgets stay at their static shares (give --replication-lag at least the round "
            "time)\n"
        )
    if run.strategy == "reconciled":
        out.extend(_starved(run))
    if cut:
        beyond = [w for w in run.windows if run.over(w) > run.bound]
        out.append(
            f"partitions: {', '.join(p.text for p in run.partitions)}; "
            + (
                f"{len(beyond)} window(s) went past the stated bound, which assumes every "
                "round completes"
                if beyond
                else "no window went past the stated bound"
            )
            + "\n"
        )
    return "".join(out)


def _rounds(run: RegionsRun) -> str:
    """The rounds each region started: "600 rounds", or "599 to 600 rounds a region"."""
    counts = [row.rounds for row in run.regions]
    low, high = min(counts), max(counts)
    return f"{low} rounds" if low == high else f"{low} to {high} rounds a region"


def _starved(run: RegionsRun) -> list[str]:
    """A line for each region whose share of the limit rounds down to nothing: its budget's
    cap is ``floor(share x what is left)``, so it admits nothing however quiet the others."""
    speeds = {row.region: Fraction(row.rate.limit, row.rate.period_us) for row in run.regions}
    total = sum(speeds.values())
    lines = []
    for region, speed in speeds.items():
        share = speed / total
        if math.floor(share * run.rate.limit) == 0:
            lines.append(
                f"region {region}: its share of the limit, floor({float(share):.3g} x "
                f"{run.rate.limit}), is 0, so its budget admits nothing; give a --rate whose "
                "limit is larger (the same rate over a longer period)\n"
            )
    return lines
