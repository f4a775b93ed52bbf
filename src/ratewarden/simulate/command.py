"""``ratewarden simulate``: run traffic through algorithms, print tables, draw plots.

Three modes share one subcommand::

    ratewarden simulate [--pattern SPEC]... [--algorithm NAME]... [--rate RATE]...
                        [--burst N] [--duration SECONDS] [--plot FILE]...
    ratewarden simulate --layers RATE,RATE[,...]... [--pattern SPEC]... [--algorithm NAME]...
                        [--duration SECONDS] [--plot FILE]...
    ratewarden simulate --bursts [--rate RATE]... [--burst N] [--algorithm NAME]...
    ratewarden simulate --accuracy [--rate RATE] [--model NAME]... [--load X]...
                        [--counting admitted|all] [--requests N] [--sources N] [--seed N]
    ratewarden simulate --region NAME=RATE[:BURST]... [--rate RATE] [--pattern [NAME=]SPEC]...
                        [--sync-interval SECONDS] [--replication-lag SECONDS] [--round-time SECONDS]
                        [--partition WHO@START-END]... [--duration SECONDS] [--plot FILE]...

Bad input exits 2 with one line naming the flag and the value.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ratewarden import algorithms
from ratewarden.argparsing import each, rate_algorithm, whole
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import (
    _flags,
    _regions_flags,
    bursts,
    layered,
    patterns,
    plots,
    regions,
    runner,
)
from ratewarden.simulate import accuracy as accuracy_report
from ratewarden.simulate._accuracy_flags import models, sizes
from ratewarden.simulate._choices import figure_paths, note, once, planned_runs

__all__ = ["add_parser", "main"]

EXIT_OK = 0
EXIT_USAGE = 2

_DEFAULT_PATTERNS = (
    "steady:load=1.5",
    "poisson:load=1.5",
    "onoff",
    "boundary",
    "retry-storm",
    "retry-storm:jitter=yes",
)
_DEFAULT_RATE = "100/minute"
_ACCURACY_RATE = "50/minute"  # Cloudflare's published example

_DESCRIPTION = """\
Simulate traffic against rate limiting algorithms in simulated time (no store, no sleeps).

By default, run traffic patterns through algorithms and print, per pattern, algorithm and
rate: requests offered, admitted, denied, the most admitted in any trailing period (and its
ratio to the limit) and, for the leaky bucket used as a shaper, the p99 wait. --plot draws
admitted vs offered over time and cumulative admitted against the contract line.

--layers runs one key under several rates at once, decided all or nothing as
Limiter.hit(key, [rate, rate]) decides them, and adds a row per layer: the denials it
speaks for (the layer that waits longest; they add up to the run's), the requests it had
no room for (a request two layers refuse counts for both) and its worst period.

--bursts prints each algorithm's worst case, found by a greedy attacker.
--accuracy compares the sliding window's estimate with the exact sliding log.
--region (one per region) runs a multi-region ReconciledBudget per region under the
global --rate, each region's traffic decided by its own budget, and prints per window
what the regions admitted together, how far over the limit, against the stated bound.
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``simulate`` to the ``ratewarden`` subcommands."""
    parser = commands.add_parser(
        "simulate",
        help="simulate traffic against algorithms: tables, plots, burst and accuracy reports",
        description=_DESCRIPTION,
        epilog=patterns.pattern_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # No flag looks like '-5': '-' then a digit is a value ('--rate -5/minute' is named).
    parser._negative_number_matcher = re.compile(r"-\.?\d")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--bursts",
        action="store_true",
        help="print the worst-case burst and state size of each algorithm",
    )
    mode.add_argument(
        "--accuracy",
        action="store_true",
        help="compare the sliding window estimate with the exact sliding log",
    )
    _regions_flags.add_arguments(mode, parser)
    parser.add_argument(
        "--pattern",
        action="append",
        metavar="SPEC",
        help=f"a traffic pattern (repeatable; see below) [default: {' '.join(_DEFAULT_PATTERNS)}]",
    )
    parser.add_argument(
        "--algorithm",
        action="append",
        metavar="NAME",
        help="an algorithm (repeatable): "
        f"{', '.join(sorted(algorithms.ALGORITHMS))} [default: all]",
    )
    parser.add_argument(
        "--rate",
        action="append",
        metavar="RATE",
        help=f"a rate such as 100/minute (repeatable) [default: {_DEFAULT_RATE}; "
        f"{_ACCURACY_RATE} with --accuracy]",
    )
    parser.add_argument(
        "--layers",
        action="append",
        metavar="RATE,RATE",
        help="rates decided together on one key, all or nothing, such as 10/second,1000/hour; "
        "a layer may take its own burst: 10/second:burst=20,1000/hour (repeatable: each is one "
        "layered limit to compare; loads are multiples of the first layer)",
    )
    parser.add_argument(
        "--burst",
        type=whole("--burst"),
        metavar="N",
        help="capacity of the bucket algorithms (gcra, token_bucket, "
        "leaky_bucket) [default: the limit]",
    )
    parser.add_argument(
        "--duration",
        type=_flags.duration,
        metavar="SECONDS",
        help="simulated seconds per run [default: 600]",
    )
    parser.add_argument(
        "--plot",
        action="append",
        metavar="FILE",
        help="write a .png or .svg figure (repeatable); with several patterns "
        "or rates, one file each: FILE-PATTERN.png, FILE-RATE.png or FILE-PATTERN-RATE.png",
    )
    parser.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="--accuracy traffic model (repeatable): "
        f"{', '.join(accuracy_report.MODELS)} [default: all]",
    )
    parser.add_argument(
        "--load",
        action="append",
        type=_flags.load,
        metavar="X",
        help="--accuracy: median source's mean rate as a multiple of the limit, above 0 and at "
        "most 1,000 (repeatable) [default: 0.5]",
    )
    parser.add_argument(
        "--counting",
        choices=accuracy_report.COUNTING,
        help="--accuracy: what both counters count: admitted requests (as ratewarden does) "
        "or every request sent (as a mitigation counter might) [default: admitted]",
    )
    parser.add_argument(
        "--requests",
        type=whole("--requests"),
        metavar="N",
        help="--accuracy: requests per model and load [default: 4000000]",
    )
    parser.add_argument(
        "--sources",
        type=whole("--sources"),
        metavar="N",
        help="--accuracy: independent sources (keys) [default: 5000]",
    )
    parser.add_argument("--seed", type=whole("--seed", minimum=0), metavar="N",
                        help="--accuracy: random seed, 0 or more [default: 1]")  # fmt: skip


def _rates(texts: Sequence[str] | None, default: str, burst: int | None) -> list[Rate]:
    rates = []
    for text in texts or [default]:
        try:
            Rate.parse(text)
        except ConfigurationError as exc:
            raise ConfigurationError(f"--rate {text!r}: {exc}") from None
        try:
            rates.append(Rate.parse(text, burst=burst))
        except ConfigurationError as exc:  # the rate is good: the burst is what is refused
            raise ConfigurationError(f"--burst {burst}: {exc} (at --rate {text})") from None
    return rates


def _algorithms(names: Sequence[str] | None) -> list[str]:
    chosen = [rate_algorithm("--algorithm", name, algorithms.ALGORITHMS) for name in names or ()]
    return list(dict.fromkeys(chosen or sorted(algorithms.ALGORITHMS)))


def _check_plots(bases: Sequence[str] | None) -> None:
    """Refuse a figure that cannot be written (or matplotlib missing) before any run."""
    if bases:
        for base in bases:
            if not base.strip():  # Path('') is '.', which check_path would name
                raise ConfigurationError(f"--plot {base!r}: give a file name, such as out.png")
            plots.check_path(Path(base))
        plots.require_matplotlib()


def _traffic(args: argparse.Namespace) -> int:
    specs = args.pattern or list(_DEFAULT_PATTERNS)
    chosen = once("--pattern", specs, each("--pattern", specs, patterns.parse), _label)
    names = _algorithms(args.algorithm)
    texts = args.rate or [_DEFAULT_RATE]
    rates = once("--rate", texts, _rates(texts, _DEFAULT_RATE, args.burst), str)
    _check_plots(args.plot)
    summaries: list[runner.Summary] = []
    for pattern, seconds, rate, paths in planned_runs(chosen, rates, str, args.duration, args.plot):
        runs = [runner.run(pattern, name, rate, seconds) for name in names]
        summaries.extend(one.summary() for one in runs)
        for path in paths:
            print(f"wrote {plots.plot_runs(runs, path)}", file=sys.stderr)
    print(runner.format_table(summaries), end="")
    return EXIT_OK


def _label(pattern: patterns.Pattern) -> str:
    return pattern.describe()


def _layered(args: argparse.Namespace) -> int:
    for flag in ("rate", "burst"):
        if getattr(args, flag) is not None:
            raise ConfigurationError(f"--{flag} cannot be used with --layers; {_NOT_LAYERS[flag]}")
    specs = args.pattern or list(_DEFAULT_PATTERNS)
    chosen = once("--pattern", specs, each("--pattern", specs, patterns.parse), _label)
    names = _algorithms(args.algorithm)
    limits = []
    for text in args.layers:  # every layered limit checked on every algorithm before a run
        try:
            limits.append(layered.parse_layers(text))
            for name in names:
                layered.check_layers(name, limits[-1])
        except ConfigurationError as exc:
            raise ConfigurationError(f"--layers {text!r}: {exc}") from None
    limits = once("--layers", args.layers, limits, _joined)
    _check_plots(args.plot)
    summaries: list[layered.LayeredSummary] = []
    planned = planned_runs(chosen, limits, _joined, args.duration, args.plot)
    for pattern, seconds, rates, paths in planned:
        runs = [layered.run_layered(pattern, name, rates, seconds) for name in names]
        summaries.extend(one.summary() for one in runs)
        for path in paths:
            print(f"wrote {plots.plot_runs(runs, path)}", file=sys.stderr)
    print(layered.format_layered(summaries), end="")
    return EXIT_OK


def _joined(rates: Sequence[Rate]) -> str:
    return " + ".join(map(str, rates))


#: Why a flag of the single-rate table is refused with --layers, and what to write instead.
_NOT_LAYERS = {
    "rate": "--rate compares single rates, --layers takes one layered limit each time it is given",
    "burst": "give a layer its own burst: --layers 10/second:burst=20,1000/hour",
}


def _bursts(args: argparse.Namespace) -> int:
    rows, notes = [], []
    names = _algorithms(args.algorithm)
    for rate in _rates(args.rate, _DEFAULT_RATE, args.burst):
        log = runner.effective_rate("sliding_log", rate)
        too_long = max(log.limit, log.capacity) > bursts.MAX_LOG_LIMIT
        if too_long and args.algorithm is not None and "sliding_log" in names:
            raise ConfigurationError(
                f"--algorithm sliding_log at {rate}: the burst table takes the sliding log up "
                f"to a limit and burst of {bursts.MAX_LOG_LIMIT:,} (its attack is quadratic); "
                f"leave it out to run the others, which go up to {bursts.MAX_LIMIT:,}"
            )
        if too_long:  # not asked for by name: the others still run
            notes.append(
                f"sliding_log left out at {rate}: the burst table takes it up to a limit and "
                f"burst of {bursts.MAX_LOG_LIMIT:,}, the others up to {bursts.MAX_LIMIT:,}"
            )
            rows.extend(bursts.burst_table(rate, [n for n in names if n != "sliding_log"]))
        else:
            rows.extend(bursts.burst_table(rate, names))
    for text in notes:
        note(text)
    print(bursts.format_bursts(rows), end="")
    return EXIT_OK


def _accuracy(args: argparse.Namespace) -> int:
    chosen = models(args.model)
    rates = _rates(args.rate, _ACCURACY_RATE, args.burst)
    requests, sources, loads = sizes(args.requests, args.sources, args.load)
    seed = 1 if args.seed is None else args.seed  # 0 is a seed, as a pattern's seed=0 is
    rows = [
        (model, rate, requests, sources, load, seed, args.counting or "admitted")
        for rate in rates
        for load in loads
        for model in chosen
    ]
    runs = [accuracy_report.prepare(*row) for row in rows]  # every row checked before the first
    reports = [run() for run in runs]
    print(accuracy_report.format_accuracy(reports), end="")
    return EXIT_OK


def _regions(args: argparse.Namespace) -> int:
    figure_paths(args.plot, [(None, None)])  # one figure: a --plot given twice is refused
    run = _regions_flags.from_flags(
        args.region, args.rate, args.pattern, args.sync_interval, args.replication_lag,
        args.duration, check_plots=lambda: _check_plots(args.plot), partitions=args.partition,
        round_time=args.round_time, strategy=args.strategy,
    )  # fmt: skip
    for base in args.plot or ():
        print(f"wrote {_regions_flags.plot_regions(run, Path(base))}", file=sys.stderr)
    print(regions.format_regions(run), end="")
    return EXIT_OK


#: The flags each mode takes; any other flag given is an error, not ignored.
_MODE_FLAGS = {
    "traffic": {"pattern", "algorithm", "rate", "layers", "burst", "duration", "plot"},
    "regions": {
        "region",
        "rate",
        "pattern",
        "sync_interval",
        "replication_lag",
        "round_time",
        "strategy",
        "partition",
        "duration",
        "plot",
    },
    "bursts": {"algorithm", "rate", "burst"},
    "accuracy": {"rate", "model", "load", "counting", "requests", "sources", "seed"},
}
_ALL_FLAGS = set().union(*_MODE_FLAGS.values())


#: The flag that picks each mode but the default one.
_MODE_NAMES = {"bursts": "--bursts", "accuracy": "--accuracy", "regions": "--region"}


def _check_flags(args: argparse.Namespace, mode: str) -> None:
    stray = sorted(f for f in _ALL_FLAGS - _MODE_FLAGS[mode] if getattr(args, f) is not None)
    if stray:
        if mode == "traffic":  # name the modes the stray flags belong to
            takers = [flag for name, flag in _MODE_NAMES.items() if _MODE_FLAGS[name] & {*stray}]
            where = "without " + " or ".join(takers)
        else:
            where = f"with {_MODE_NAMES[mode]}"
        flags = ", ".join("--" + f.replace("_", "-") for f in stray)
        raise ConfigurationError(f"{flags} cannot be used {where}")


def main(args: argparse.Namespace) -> int:
    """Run ``ratewarden simulate`` with parsed ``args``; returns the exit code."""
    mode = (
        "bursts" if args.bursts else "accuracy" if args.accuracy
        else "regions" if args.region else "traffic"
    )  # fmt: skip
    try:
        _check_flags(args, mode)
        if args.bursts:
            return _bursts(args)
        if args.accuracy:
            return _accuracy(args)
        if args.region:
            return _regions(args)
        if args.layers:
            return _layered(args)
        return _traffic(args)
    except ConfigurationError as exc:
        print(f"ratewarden simulate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
