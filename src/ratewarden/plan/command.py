"""``ratewarden plan``: capacity planning from the command line.

::

    ratewarden plan --rps 30000 --local-reject 10% --global-share 60% --descriptors 1.5 \\
                    --keys 5000000 --key-bytes 100 --primaries 4

Bad input exits 2 with one line naming the flag; a Redis that ``--measure``
cannot reach exits 1. ``--measure`` runs through the ``measure`` that
``ratewarden.cli`` passes to ``main``: the command line is the composition root
that opens the store, so this package never talks to Redis itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
from typing import TYPE_CHECKING, Protocol

from ratewarden import algorithms
from ratewarden.argparsing import rate_algorithm, whole
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.plan._checks import FigureTooLargeError
from ratewarden.plan._flags import number, region, share, within_a_day
from ratewarden.plan._model import (
    DEFAULT_BYTES_PER_CALL,
    PlanInput,
    Region,
    format_plan,
    plan,
)
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from collections.abc import Callable

    from ratewarden.storage.measure import Measured

    #: Makes the converter of the flag it is given (argparse's ``type=``).
    _Kind = Callable[[str], argparse._ActionType]

__all__ = ["Measure", "add_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_DESCRIPTION = """\
Size the global tier: script calls per second (in total and per primary), Redis memory,
bandwidth, primaries needed, latency added per check, and the over-admission bound of
failover, leases and multi-region reconciliation on one key. Each figure is printed with
the formula that made it; a figure whose inputs are missing says which flag to give.

Shares take 0.1 or 10%. A value starting with '-' and a digit (-5%, -0.05) is read as the
flag's value, which the flag's own range check then refuses.

--measure redis://HOST:PORT runs real decisions on that server (random keys under the real
key schema, checked not to exist first, deleted afterwards) and uses its MEMORY USAGE per key.
"""

_EXAMPLE = """\
example (the worked example of docs/capacity.md):
  ratewarden plan --rps 30000 --local-reject 10% --global-share 60% --descriptors 1.5 \\
                  --keys 5000000 --key-bytes 100 --primaries 4
"""


class Measure(Protocol):
    """How ``--measure URL`` runs, given by the composition root (``ratewarden.cli``)."""

    def __call__(
        self, url: str, algorithm: str, limit: Rate, key_length: int
    ) -> tuple[str, Measured]:
        """Measure ``algorithm`` at ``limit`` on the store at ``url``: the server's name as it
        may be printed (passwords hidden) and what was measured. Raises
        ``ConfigurationError`` (bad input, exit 2) or ``StorageError`` (exit 1)."""
        ...


_ZERO_OK = functools.partial(number, zero_ok=True)
#: A typical key's limit when --limit is not given.
DEFAULT_LIMIT = "100/minute"
#: The keys --measure writes when --key-length is not given.
DEFAULT_KEY_LENGTH = 32
#: The longest key --measure writes (ratewarden.storage.measure's own bound).
KEY_LENGTH_MAX = 1024
#: The most regions --regions N makes (each one a Region at --limit).
REGIONS_MAX = 1000

#: The plan's flags in --help order: flag -> (the converter made for it, or None for text;
#: default; metavar; help). A flag is the PlanInput field of the same name where there is one.
_FLAGS: dict[str, tuple[_Kind | None, object, str, str]] = {
    "--rps": (number, None, "N", "peak requests per second reaching the gateways"),
    "--local-reject": (functools.partial(share, below_one=True), 0.0, "SHARE",
                       "share the local tier rejects before any global check, from 0 to below "
                       "1 (or 0%% to below 100%%) [default: 0]"),
    "--global-share": (share, 1.0, "SHARE",
                       "share of the rest that needs a global check [default: 1]"),
    "--descriptors": (number, 1.0, "X", "script calls per global check (descriptors on "
                      "different keys) [default: 1]"),
    "--keys": (whole, None, "N", "active keys at peak"),
    "--algorithm": (None, "gcra", "NAME",
                    f"{', '.join(sorted(algorithms.ALGORITHMS))} [default: gcra]"),
    "--limit": (None, None, "RATE", "a typical key's limit, for --measure and the "
                "over-admission bounds [default: 100/minute]"),
    "--burst": (whole, None, "N", "that limit's burst (bucket algorithms; each region's "
                "with --regions) [default: the limit]"),
    "--key-bytes": (number, None, "B",
                    "Redis memory per key, key name and overhead included (see --measure)"),
    "--measure": (None, None, "URL", "measure --key-bytes on this Redis (redis://...)"),
    "--key-length": (functools.partial(whole, maximum=KEY_LENGTH_MAX), None, "N",
                     "--measure: characters in a key, 1 to 1,024 [default: 32]"),
    "--primaries": (whole, None, "N", "Redis primaries (shards)"),
    "--calls-per-primary": (number, None, "N", "script calls per second one primary sustains "
                            "(Redis runs scripts on one core per primary; take it from a load "
                            "test)"),
    "--max-utilization": (functools.partial(share, above_zero=True), None,
                          "SHARE", "fill primaries to at most this share, above 0 and below 1 "
                          "(or below 100%%: a full primary's queue has no bound) [default: 50%%]"),
    "--bytes-per-call": (number, DEFAULT_BYTES_PER_CALL, "B",
                         "request + reply bytes of one call [default: 300]"),
    "--rtt-ms": (_ZERO_OK, None, "MS", "round trip from a gateway to Redis"),
    "--timeout-ms": (number, None, "MS", "the limiter's timeout, for the latency headroom"),
    "--replicas": (functools.partial(whole, minimum=0), 0, "N",
                   "replicas per primary [default: 0]"),
    "--replication-lag-ms": (_ZERO_OK, None, "MS", "replication lag: what a failover may rewind"),
    "--instances": (whole, None, "N", "gateways holding leases"),
    "--lease": (whole, None, "K", "units per lease"),
    "--regions": (functools.partial(whole, maximum=REGIONS_MAX), None, "N",
                  "regions reconciling asynchronously, each capped at --limit with --burst "
                  "(at most 1,000)"),
    "--region-rate": (region, None, "NAME=RATE[:BURST]",
                      "one region's rate cap on the key, e.g. eu=600/minute:10 (repeatable, each "
                      "region once; the burst defaults to the rate's limit, as Rate's does)"),
    "--sync-interval-ms": (within_a_day, None, "MS",
                           "how often regions exchange counts (at most a day)"),
    "--region-lag-ms": (functools.partial(within_a_day, zero_ok=True), None, "MS",
                        "delay before a region sees another's counts, at most a day "
                        "[default: 0]"),
}  # fmt: skip
#: Give one or the other: a number of regions at the full limit, or each region's rate.
_EITHER = ("--regions", "--region-rate")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` to the ``ratewarden`` subcommands."""
    parser = commands.add_parser(
        "plan",
        help="capacity planning: Redis memory, calls/s per primary, latency, over-admission",
        description=_DESCRIPTION,
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Every value here is a number, a share or a rate, and no flag looks like '-5': so '-'
    # then a digit is a value, and '--local-reject -5%' reaches the range check. argparse
    # itself takes only what it knows as a negative number ('-0.05', not '-5%') for one.
    parser._negative_number_matcher = re.compile(r"-\.?\d")
    either = parser.add_mutually_exclusive_group()
    for flag, (kind, default, metavar, text) in _FLAGS.items():
        (either if flag in _EITHER else parser).add_argument(
            flag,
            type=str if kind is None else kind(flag),
            default=default,
            metavar=metavar,
            help=text + " (required)" if flag == "--rps" else text,
            action="append" if flag == "--region-rate" else "store",
        )


def _rate(flag: str, text: str, burst: int | None = None) -> Rate:
    try:
        rate = Rate.parse(text)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{flag} {text!r}: {exc}") from None
    try:
        return Rate.parse(text, burst=burst)
    except ConfigurationError as exc:  # the rate is good: the burst is what is refused
        raise ConfigurationError(f"--burst {burst}: {exc} (at {flag} {rate})") from None


def _flag(args: argparse.Namespace, field: str) -> str:
    """The flag that gives PlanInput's ``field`` (``limit`` with ``--burst`` when one was given)."""
    if field == "regions":
        return "--region-rate" if args.region_rate else "--regions"
    if field == "limit" and args.burst is not None:
        return "--limit, --burst"
    return "--" + field.replace("_", "-")


def _burst_taken(algorithm: str, limit: Rate, burst: int | None) -> None:
    """Refuse ``--burst`` where ``algorithm`` has no separate burst, in the library's words (the
    check ``hit`` and ``--measure`` run), before anything is measured."""
    try:
        algorithms.get(algorithm).params(limit)
    except ConfigurationError as exc:
        raise ConfigurationError(f"--burst {burst}: {exc}") from None


#: PlanInput's fields: each is given by the flag of the same name (limit, key_bytes and regions
#: are made from theirs).
_PLAN_FIELDS = frozenset(field.name for field in dataclasses.fields(PlanInput))


def _regions(args: argparse.Namespace, limit: Rate) -> tuple[Region, ...]:
    """``--regions N`` at ``limit`` (its burst ``--burst``), or each ``--region-rate`` once."""
    if args.regions:
        return tuple(Region(f"region-{i + 1}", limit) for i in range(args.regions))
    pairs: list[tuple[str, Rate]] = args.region_rate or []
    names = [name for name, _ in pairs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigurationError(
                f"each --region-rate NAME may be given once; {name!r} is given {names.count(name)} "
                "times"
            )
    return tuple(Region(name, rate) for name, rate in pairs)


def _inputs(
    args: argparse.Namespace, limit: Rate, regions: tuple[Region, ...], measured: Measured | None
) -> PlanInput:
    # A flag not given (None) leaves PlanInput's default.
    flags = {k: v for k, v in vars(args).items() if k in _PLAN_FIELDS and v is not None}
    return PlanInput(
        **{
            **flags,
            "limit": limit,
            "key_bytes": measured.key_bytes if measured else args.key_bytes,
            "regions": regions,
        }
    )


def _unused(args: argparse.Namespace) -> list[str]:
    """What was given but has nothing to act on, and the flag it waits for (the rows say so of
    the figures' inputs)."""
    notes = []
    if args.key_length is not None and not args.measure:
        notes.append("--key-length is used by --measure only: give --measure URL")
    if args.max_utilization is not None and args.calls_per_primary is None:
        notes.append("--max-utilization is used with --calls-per-primary only: give it")
    given = [f for f, v in (("--limit", args.limit), ("--burst", args.burst)) if v is not None]
    # A --region-rate is its own rate and :BURST (docs/capacity.md): it uses neither.
    if given and not (args.measure or args.replication_lag_ms is not None or args.regions):
        notes.append(
            f"{' and '.join(given)} {'are' if len(given) > 1 else 'is'} used by --measure, "
            "--replication-lag-ms and --regions only: give one"
            + ("; each --region-rate has its own rate and :BURST" if args.region_rate else "")
        )
    for flag, value in (("--sync-interval-ms", args.sync_interval_ms),
                        ("--region-lag-ms", args.region_lag_ms)):  # fmt: skip
        if value is not None and not (args.regions or args.region_rate):
            notes.append(f"{flag} is used with --regions or --region-rate only: give one")
    return notes


def _measured_lines(server: str, found: Measured, limit: Rate) -> str:
    lines = [f"measured on {server} ({found.calls:,} decisions, {found.algorithm})",
             f"  MEMORY USAGE of one key  {found.key_bytes:,} B"]  # fmt: skip
    if found.extrapolated_from is not None:
        (half, at_half), (fill, at_fill) = found.extrapolated_from
        lines[-1] += (
            f", extrapolated to {limit.capacity:,} entries: measured {at_half:,} B at "
            f"{half:,} and {at_fill:,} B at {fill:,}, taken as linear (see capacity.md)"
        )
    if found.usec_per_call is not None:
        ceiling = 1_000_000 / found.usec_per_call
        lines.append(
            f"  script execution         {found.usec_per_call:.2f} us per call: at most "
            f"{ceiling:,.0f} calls/s per core before network I/O (a ceiling, not "
            "--calls-per-primary)"
        )
        if found.extrapolated_from is not None:
            lines.append(
                f"  (timed on a state of {found.filled:,} entries, not {limit.capacity:,}: "
                f"a fuller {found.algorithm} costs more per call)"
            )
    return "\n".join(lines) + "\n"


def _without_reprs(text: str) -> str:
    """``text`` without the ``<redis.client.Redis(<...>)>`` object reprs redis-py puts in some
    messages (1 KB of connection settings after Sentinel's 'No master found'): the cause stays."""
    kept, at = [], 0
    while (start := text.find("<redis.", at)) >= 0:
        kept.append(text[at:start].rstrip(" :"))
        depth, at = 0, start
        for at in range(start, len(text)):
            depth += {"<": 1, ">": -1}.get(text[at], 0)
            if depth == 0:
                break
        at += 1
    return "".join(kept) + text[at:]


def main(args: argparse.Namespace, measure: Measure) -> int:
    """Run ``ratewarden plan`` with parsed ``args``; returns the exit code. ``measure`` runs
    ``--measure`` (the store is the caller's to open)."""
    try:
        # --rps is checked here, not by argparse: argparse reports a missing required flag
        # before an unknown one, so a misspelt --rsp was said to be a missing --rps.
        if args.rps is None:
            raise ConfigurationError(
                "the following arguments are required: --rps (peak requests per second); see "
                "ratewarden plan --help"
            )
        if args.measure and args.key_bytes is not None:
            raise ConfigurationError("give --key-bytes or --measure, not both")
        if (args.instances is None) != (args.lease is None):
            raise ConfigurationError(
                "--instances and --lease go together (gateways, and units per lease): give both"
            )
        if (args.regions or args.region_rate) and args.sync_interval_ms is None:
            raise ConfigurationError(
                "--regions and --region-rate need --sync-interval-ms (how often counts exchange)"
            )
        rate_algorithm("--algorithm", args.algorithm, algorithms.ALGORITHMS)
        limit = _rate("--limit", args.limit or DEFAULT_LIMIT, args.burst)
        _burst_taken(args.algorithm, limit, args.burst)
        regions = _regions(args, limit)  # refused before --measure writes to a server
        measured = None
        if args.measure:
            key_length = DEFAULT_KEY_LENGTH if args.key_length is None else args.key_length
            measured = measure(args.measure, args.algorithm, limit, key_length)
        result = plan(_inputs(args, limit, regions, measured[1] if measured else None))
    except FigureTooLargeError as exc:
        print(
            f"ratewarden plan: error: {exc.said(functools.partial(_flag, args))}", file=sys.stderr
        )
        return EXIT_USAGE
    except ConfigurationError as exc:
        print(f"ratewarden plan: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StorageError as exc:
        print(f"ratewarden plan: --measure failed: {_without_reprs(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    for note in _unused(args):
        print(f"ratewarden plan: note: {note}", file=sys.stderr)
    if measured is not None:
        print(_measured_lines(*measured, limit))
    print(format_plan(result), end="")
    return EXIT_OK
