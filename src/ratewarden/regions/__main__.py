"""``python -m ratewarden.regions bound``: print the over-admission bound of a reconciled budget.

::

    python -m ratewarden.regions bound --region us=100/s --region eu=50/s \\
        --region ap=20/s --sync-interval 1 --replication-lag 0.1

Each ``--region NAME=RATE`` is a region's rate cap (``Rate.parse`` syntax;
``NAME=RATE:BURST`` sets its burst). Exits 2 with the reason on bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ratewarden.argparsing import CommandParser
from ratewarden.errors import ConfigurationError
from ratewarden.regions._bound import _seconds_us, overshoot_bound, parse_region_rate


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="python -m ratewarden.regions")
    commands = parser.add_subparsers(dest="command", required=True)
    bound = commands.add_parser(
        "bound",
        help="requests a window may go over its global limit",
        description="Print the most requests a ReconciledBudget's regions together may admit "
        "over the global limit in one window: over every region, its burst plus its rate x "
        "(sync interval + replication lag), rounded up (docs/regions.md#the-bound).",
    )
    bound.add_argument(
        "--region",
        action="append",
        required=True,
        metavar="NAME=RATE[:BURST]",
        help="a region and its rate cap, such as us=100/s or eu=50/s:5 (Rate syntax; the "
        "burst defaults to the rate's limit); repeat once per region, each name once",
    )
    bound.add_argument(
        "--sync-interval",
        type=float,
        required=True,
        metavar="SECONDS",
        help="seconds between two reconciliation rounds of a region (the budget's "
        "sync_interval); above 0",
    )
    bound.add_argument(
        "--replication-lag",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the oldest a round may be when it is applied (the budget's replication_lag); "
        "0 or more (default: 0)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        pairs = [parse_region_rate(text) for text in args.region]
        rates = dict(pairs)
        if len(rates) != len(pairs):
            raise ConfigurationError("each --region NAME may be given once")
        # Checked here to name the flags; overshoot_bound names its parameters.
        _seconds_us("--sync-interval", args.sync_interval, zero_ok=False)
        _seconds_us("--replication-lag", args.replication_lag, zero_ok=True)
        if len(rates) < 2:
            raise ConfigurationError(
                "give at least two --region: the bound is what regions admit over the global "
                "limit together, and one region alone is held to the limit by its own store"
            )
        total = overshoot_bound(rates, args.sync_interval, args.replication_lag)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    staleness = args.sync_interval + args.replication_lag
    print(f"staleness = sync interval + replication lag = {staleness:g} s")
    for name, rate in rates.items():
        part = overshoot_bound({name: rate}, args.sync_interval, args.replication_lag)
        print(f"  {name:<12} {rate!s:<24} burst {rate.capacity} + rate x staleness -> {part}")
    print(f"bound: at most {total} requests over the global limit per window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
