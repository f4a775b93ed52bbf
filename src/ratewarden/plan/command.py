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
import math
import re
import sys
from typing import TYPE_CHECKING, Protocol

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.plan._model import (
    DEFAULT_BYTES_PER_CALL,
    DEFAULT_MAX_UTILIZATION,
    PlanInput,
    Region,
    format_plan,
    plan,
)
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage.measure import Measured

__all__ = ["Measure", "add_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_DESCRIPTION = """\
Size the global tier: script calls per second (in total and per primary), Redis memory,
bandwidth, primaries needed, latency added per check, and the over-admission bound of
failover, leases and multi-region reconciliation on one key. Each figure is printed with
the formula that made it; a figure whose inputs are missing says which flag to give.

Shares take 0.1 or 10%. --measure redis://HOST:PORT runs real decisions on that server
(random keys under the real key schema, checked not to exist first, deleted afterwards) and
uses its MEMORY USAGE per key.
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


def _number(flag: str, zero_ok: bool = False) -> argparse._ActionType:
    def convert(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            low = "0 or more" if zero_ok else "above 0"
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} must be a number {low}")
        return value

    return convert


def _whole(flag: str, minimum: int = 1) -> argparse._ActionType:
    def convert(raw: str) -> int:
        if not re.fullmatch(r"[0-9][0-9_]*", raw.strip()) or int(raw) < minimum:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} must be a whole number >= {minimum}")
        return int(raw)

    return convert


def _share(flag: str) -> argparse._ActionType:
    def convert(raw: str) -> float:
        text = raw.strip()
        scale = 100.0 if text.endswith("%") else 1.0
        try:
            value = float(text.removesuffix("%")) / scale
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} is not a share") from None
        if not 0 <= value <= 1:
            raise argparse.ArgumentTypeError(f"{flag} {raw!r} must be from 0 to 1 (or 0% to 100%)")
        return value

    return convert


def _region(raw: str) -> tuple[str, str]:
    name, eq, rate = raw.partition("=")
    if not eq or not name.strip() or not rate.strip():
        raise argparse.ArgumentTypeError(f"--region-rate {raw!r} must look like eu=600/minute")
    return name.strip(), rate.strip()


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` to the ``ratewarden`` subcommands."""
    parser = commands.add_parser(
        "plan",
        help="capacity planning: Redis memory, calls/s per primary, latency, over-admission",
        description=_DESCRIPTION,
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--rps",
        type=_number("--rps"),
        required=True,
        metavar="N",
        help="peak requests per second reaching the gateways",
    )
    add(
        "--local-reject",
        type=_share("--local-reject"),
        default=0.0,
        metavar="SHARE",
        help="share the local tier rejects before any global check [default: 0]",
    )
    add(
        "--global-share",
        type=_share("--global-share"),
        default=1.0,
        metavar="SHARE",
        help="share of the rest that needs a global check [default: 1]",
    )
    add(
        "--descriptors",
        type=_number("--descriptors"),
        default=1.0,
        metavar="X",
        help="script calls per global check (descriptors on different keys) [default: 1]",
    )
    add("--keys", type=_whole("--keys"), metavar="N", help="active keys at peak")
    add(
        "--algorithm",
        default="gcra",
        metavar="NAME",
        help=f"{', '.join(sorted(algorithms.ALGORITHMS))} [default: gcra]",
    )
    add(
        "--limit",
        default="100/minute",
        metavar="RATE",
        help="a typical key's limit, for --measure and the over-admission bounds "
        "[default: 100/minute]",
    )
    add(
        "--burst",
        type=_whole("--burst"),
        metavar="N",
        help="that limit's burst (bucket algorithms)",
    )
    add(
        "--key-bytes",
        type=_number("--key-bytes"),
        metavar="B",
        help="Redis memory per key, key name and overhead included (see --measure)",
    )
    add("--measure", metavar="URL", help="measure --key-bytes on this Redis (redis://...)")
    add(
        "--key-length",
        type=_whole("--key-length"),
        default=32,
        metavar="N",
        help="--measure: characters in a key [default: 32]",
    )
    add("--primaries", type=_whole("--primaries"), metavar="N", help="Redis primaries (shards)")
    add(
        "--calls-per-primary",
        type=_number("--calls-per-primary"),
        metavar="N",
        help="script calls per second one primary sustains (Redis runs scripts on one core "
        "per primary; take it from a load test)",
    )
    add(
        "--max-utilization",
        type=_share("--max-utilization"),
        default=DEFAULT_MAX_UTILIZATION,
        metavar="SHARE",
        help="fill primaries to at most this share [default: 50%%]",
    )
    add(
        "--bytes-per-call",
        type=_number("--bytes-per-call"),
        default=DEFAULT_BYTES_PER_CALL,
        metavar="B",
        help="request + reply bytes of one call [default: 300]",
    )
    add(
        "--rtt-ms",
        type=_number("--rtt-ms", zero_ok=True),
        metavar="MS",
        help="round trip from a gateway to Redis",
    )
    add(
        "--timeout-ms",
        type=_number("--timeout-ms"),
        metavar="MS",
        help="the limiter's timeout, for the latency headroom",
    )
    add(
        "--replicas",
        type=_whole("--replicas", 0),
        default=0,
        metavar="N",
        help="replicas per primary [default: 0]",
    )
    add(
        "--replication-lag-ms",
        type=_number("--replication-lag-ms", zero_ok=True),
        metavar="MS",
        help="replication lag: what a failover may rewind",
    )
    add("--instances", type=_whole("--instances"), metavar="N", help="gateways holding leases")
    add("--lease", type=_whole("--lease"), metavar="K", help="units per lease")
    regions = parser.add_mutually_exclusive_group()
    regions.add_argument(
        "--regions",
        type=_whole("--regions"),
        metavar="N",
        help="regions reconciling asynchronously, each at up to the full limit",
    )
    regions.add_argument(
        "--region-rate",
        type=_region,
        action="append",
        metavar="NAME=RATE",
        help="one region's peak rate on the key (repeatable), e.g. eu=600/minute",
    )
    add(
        "--sync-interval-ms",
        type=_number("--sync-interval-ms"),
        metavar="MS",
        help="how often regions exchange counts",
    )
    add("--region-lag-ms", type=_number("--region-lag-ms", zero_ok=True), default=0.0,
        metavar="MS", help="delay before a region sees another's counts [default: 0]")  # fmt: skip


def _rate(flag: str, text: str, burst: int | None = None) -> Rate:
    try:
        return Rate.parse(text, burst=burst)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{flag} {text!r}: {exc}") from None


def _regions(args: argparse.Namespace, limit: Rate) -> tuple[Region, ...]:
    full = limit.limit * 1_000_000 / limit.period_us
    if args.regions:
        return tuple(Region(f"region {i + 1}", full) for i in range(args.regions))
    found = []
    for name, text in args.region_rate or ():
        rate = _rate("--region-rate", text)
        found.append(Region(name, rate.limit * 1_000_000 / rate.period_us))
    return tuple(found)


def _inputs(args: argparse.Namespace, measured: Measured | None) -> PlanInput:
    limit = _rate("--limit", args.limit, args.burst)
    return PlanInput(
        rps=args.rps,
        local_reject=args.local_reject,
        global_share=args.global_share,
        descriptors=args.descriptors,
        keys=args.keys,
        algorithm=args.algorithm,
        limit=limit,
        key_bytes=measured.key_bytes if measured else args.key_bytes,
        primaries=args.primaries,
        calls_per_primary=args.calls_per_primary,
        max_utilization=args.max_utilization,
        bytes_per_call=args.bytes_per_call,
        rtt_ms=args.rtt_ms,
        timeout_ms=args.timeout_ms,
        replicas=args.replicas,
        replication_lag_ms=args.replication_lag_ms,
        instances=args.instances,
        lease=args.lease,
        regions=_regions(args, limit),
        sync_interval_ms=args.sync_interval_ms,
        region_lag_ms=args.region_lag_ms,
    )


def _measured_lines(server: str, found: Measured) -> str:
    lines = [f"measured on {server} ({found.calls:,} decisions, {found.algorithm})",
             f"  MEMORY USAGE of one key  {found.key_bytes} B"]  # fmt: skip
    if found.usec_per_call is not None:
        ceiling = 1_000_000 / found.usec_per_call
        lines.append(
            f"  script execution         {found.usec_per_call:.2f} us per call: at most "
            f"{ceiling:,.0f} calls/s per core before network I/O (a ceiling, not "
            "--calls-per-primary)"
        )
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace, measure: Measure) -> int:
    """Run ``ratewarden plan`` with parsed ``args``; returns the exit code. ``measure`` runs
    ``--measure`` (the store is the caller's to open)."""
    try:
        if args.measure and args.key_bytes is not None:
            raise ConfigurationError("give --key-bytes or --measure, not both")
        algorithms.get(args.algorithm)
        limit = _rate("--limit", args.limit, args.burst)
        measured = None
        if args.measure:
            measured = measure(args.measure, args.algorithm, limit, args.key_length)
        result = plan(_inputs(args, measured[1] if measured else None))
    except ConfigurationError as exc:
        print(f"ratewarden plan: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StorageError as exc:
        print(f"ratewarden plan: --measure failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if measured is not None:
        print(_measured_lines(*measured))
    print(format_plan(result), end="")
    return EXIT_OK
