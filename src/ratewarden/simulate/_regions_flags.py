"""``ratewarden simulate --region ...``: its flags, read into a run, and its figure.

``add_arguments`` adds ``--region`` (the mode: one per region), ``--sync-interval``,
``--replication-lag``, ``--round-time``, ``--strategy`` and ``--partition``;
``from_flags`` checks every flag before anything runs and returns the run
(``regions.run_regions``); ``plot_regions`` draws it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ratewarden.argparsing import naming
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions import parse_region_rate
from ratewarden.simulate import patterns, plots
from ratewarden.simulate._choices import run_length
from ratewarden.simulate._fleets import STRATEGIES
from ratewarden.simulate._partitions import parse_partition
from ratewarden.simulate._pattern import Pattern
from ratewarden.simulate.regions import RegionsRun, run_regions
from ratewarden.simulate.runner import check_duration

__all__ = [
    "DEFAULT_PATTERN",
    "DEFAULT_RATE",
    "add_arguments",
    "from_flags",
    "plot_regions",
    "title",
]

#: The global rate when --rate is not given (the worked example of docs/regions.md).
DEFAULT_RATE = "6000/minute"
#: Every region's traffic when --pattern is not given: each alone offers the whole limit.
DEFAULT_PATTERN = "poisson:load=1"

_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")


#: The longest sync interval or replication lag a ReconciledBudget takes, in seconds: a day.
DAY_S = 86_400


def _seconds(flag: str, *, zero_ok: bool, day: bool = True) -> Callable[[str], float]:
    """Seconds; with ``day``, at most a day, said as written (the budget's own refusal named
    its parameter, ``sync_interval 1000000000.0``, not the flag)."""

    def convert(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} is not a number") from None
        if not (value >= 0 if zero_ok else value > 0) or value == float("inf"):
            least = ">= 0" if zero_ok else "above 0"
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} must be a number {least}")
        if day and value > DAY_S:
            raise argparse.ArgumentTypeError(
                f"{flag} {raw!r} is more than a day ({DAY_S:,} s), the most a ReconciledBudget "
                "takes; check the unit (seconds)"
            )
        return value

    return convert


def add_arguments(mode: Any, parser: argparse.ArgumentParser) -> None:
    """``--region`` into the mutually exclusive ``mode`` group, its two options into ``parser``."""
    mode.add_argument(
        "--region",
        action="append",
        metavar="NAME=RATE[:BURST]",
        help="a region and its rate cap, such as us=100/s:1 (repeatable, one per region): "
        "simulate a ReconciledBudget per region under the global --rate "
        f"[default rate: {DEFAULT_RATE}; pattern: {DEFAULT_PATTERN} in every region]",
    )
    parser.add_argument(
        "--sync-interval",
        type=_seconds("--sync-interval", zero_ok=False),
        metavar="SECONDS",
        help="--region: seconds between a region's sync rounds [default: 1]",
    )
    parser.add_argument(
        "--replication-lag",
        type=_seconds("--replication-lag", zero_ok=True),
        metavar="SECONDS",
        help="--region: how old the peers' counts are when a round applies them [default: 0]",
    )
    parser.add_argument(
        "--round-time",
        type=_seconds("--round-time", zero_ok=True, day=False),
        metavar="SECONDS",
        help="--region: how long a round takes from reading the peers to applying their "
        "counts; a round slower than --replication-lag is stale [default: the lag]",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        help="--region: what every region runs: reconciled (a ReconciledBudget), quota (a "
        "RegionalQuota, shares from traffic, rebalanced every --sync-interval) or static (a "
        "RegionalQuota with shares by the region rates) [default: reconciled]",
    )
    parser.add_argument(
        "--partition",
        action="append",
        metavar="WHO@START-END",
        help="--region: cut links for a while, seconds into the run (repeatable): NAME@S-E cuts "
        "NAME off both ways, A->B@S-E stops A reading B, A->*@S-E stops A reading any peer, "
        "*->A@S-E stops every peer reading A",
    )


def _regions(texts: Sequence[str]) -> dict[str, Rate]:
    pairs = [parse_region_rate(text) for text in texts]
    rates = dict(pairs)
    if len(rates) != len(pairs):
        raise ConfigurationError("each --region NAME may be given once")
    if len(rates) < 2:
        raise ConfigurationError("give two or more --region NAME=RATE: one per region")
    return rates


def _patterns(specs: Sequence[str] | None, names: Sequence[str]) -> dict[str, Pattern]:
    """``--pattern NAME=SPEC`` for one region, ``--pattern SPEC`` for every other one. A
    pattern given to several regions with no seed of its own gets seed 1, 2, ... by region,
    so that their random traffic is not the same."""
    own: dict[str, Pattern] = {}
    shared: list[str] = []
    for spec in specs or [DEFAULT_PATTERN]:
        name, sep, rest = spec.partition("=")
        if sep and ":" not in name and name not in names:  # NAME=SPEC, a NAME no region has
            raise ConfigurationError(
                f"--pattern {spec!r}: {name!r} is not a region (the regions are {', '.join(names)})"
            )
        if sep and name in names:
            if name in own:
                raise ConfigurationError(f"--pattern {spec!r}: region {name!r} has a pattern")
            with naming("--pattern", spec):
                own[name] = patterns.parse(rest)
        else:
            shared.append(spec)
    if len(shared) > 1:
        raise ConfigurationError(
            f"--pattern {shared[1]!r}: give one pattern for every region, or NAME=SPEC for "
            f"each region ({', '.join(names)})"
        )
    chosen = {}
    for index, name in enumerate(names):
        if name in own:
            chosen[name] = own[name]
            continue
        if not shared:
            raise ConfigurationError(f"region {name!r} has no --pattern; give it NAME=SPEC")
        with naming("--pattern", shared[0]):
            pattern = patterns.parse(shared[0])
        if hasattr(pattern, "seed") and "seed=" not in shared[0]:
            pattern = dataclasses.replace(pattern, seed=index + 1)  # type: ignore[type-var]
        chosen[name] = pattern
    return chosen


def from_flags(
    regions: Sequence[str],
    rates: Sequence[str] | None,
    specs: Sequence[str] | None,
    sync_interval: float | None,
    replication_lag: float | None,
    duration_s: float | None,
    *,
    check_plots: Callable[[], None],
    partitions: Sequence[str] | None = None,
    round_time: float | None = None,
    strategy: str | None = None,
) -> RegionsRun:
    """Every flag checked (``check_plots`` too), then the run."""
    region_rates = _regions(regions)
    if rates is not None and len(rates) > 1:
        raise ConfigurationError("--region takes one global --rate")
    text = rates[0] if rates else DEFAULT_RATE
    try:
        rate = Rate.parse(text)
    except ConfigurationError as exc:
        raise ConfigurationError(f"--rate {text!r}: {exc}") from None
    chosen = _patterns(specs, list(region_rates))
    duration = run_length(list(chosen.values()), duration_s)
    cuts = [
        parse_partition(text, list(region_rates), check_duration(duration))
        for text in partitions or ()
    ]
    check_plots()
    return run_regions(
        region_rates,
        rate,
        chosen,
        sync_interval=1.0 if sync_interval is None else sync_interval,
        replication_lag=replication_lag or 0.0,
        duration_s=duration,
        partitions=cuts,
        round_time=round_time,
        strategy=strategy or "reconciled",
    )


def plot_regions(run: RegionsRun, path: Path) -> Path:
    """Each window's admissions stacked by region, against the limit and (for reconciled
    budgets) limit + the bound; the spans a ``--partition`` cut shaded on both panels."""
    plots.check_path(path)
    figure = plots.require_matplotlib()
    fig = figure.Figure(figsize=(12, 6.4), layout="constrained")
    axes, over = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    period_s = run.rate.period_us / 1_000_000
    starts = [window.start_us / 1_000_000 for window in run.windows]
    below = [0] * len(run.windows)
    for index, row in enumerate(run.regions):
        heights = [window.admitted[index] for window in run.windows]
        axes.bar(starts, heights, width=period_s, bottom=below, align="edge",
                 color=_COLOURS[index % len(_COLOURS)], label=row.region)  # fmt: skip
        below = [b + h for b, h in zip(below, heights, strict=True)]
    axes.axhline(run.rate.limit, color="tab:red", linewidth=1.0, label=f"limit ({run.rate})")
    for number, cut in enumerate(run.partitions):
        for panel in (axes, over):
            panel.axvspan(cut.start_us / 1_000_000, cut.end_us / 1_000_000, color="0.5",
                          alpha=0.15, hatch="//" if number % 2 else None, linewidth=0,
                          label=f"links cut: {cut.text}" if panel is axes else None)  # fmt: skip
    axes.set_ylabel("admitted in the window")
    axes.legend(loc="lower right", fontsize="x-small")
    over.bar(starts, [run.over(window) for window in run.windows], width=period_s,
             align="edge", color="tab:red", label="over the limit")  # fmt: skip
    if run.strategy == "reconciled":
        over.axhline(run.bound, color="tab:red", linestyle="--", linewidth=0.8,
                     label=f"stated bound (+{run.bound})")  # fmt: skip
    over.set_ylim(0, max(1.0, over.get_ylim()[1]))  # no window over: 0 at the bottom, not mid-axis
    over.set_ylabel("over the limit")
    over.set_xlabel("seconds")
    over.legend(loc="upper right", fontsize="x-small")
    fig.suptitle(title(run))
    try:
        fig.savefig(path, format=path.suffix.lower().lstrip("."))
    except OSError as exc:
        raise ConfigurationError(f"plot file {str(path)!r}: cannot write: {exc}") from exc
    return path


def title(run: RegionsRun) -> str:
    """What every region ran, and how its rounds went, for the figure's title."""
    if run.strategy == "reconciled":
        took = "" if run.round_time is None else f", rounds taking {run.round_time:g} s"
        return (
            "ReconciledBudget in each region: admitted per window by region (sync every "
            f"{run.sync_interval:g} s, replication lag {run.replication_lag:g} s{took})"
        )
    if run.strategy == "quota":
        return (
            "RegionalQuota in each region, shares from traffic: admitted per window by region "
            f"(rebalanced every {run.sync_interval:g} s; allowances add up to the limit)"
        )
    return (
        "RegionalQuota in each region, static shares: admitted per window by region "
        "(allowances add up to the limit)"
    )
