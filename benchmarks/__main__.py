"""``python -m benchmarks``: run the suite, print one table and the targets, write JSON.

``scripts/bench`` is the way to run it: it starts a redis-server and a memcached
and passes ``--redis-url`` and ``--memcached-url``. Without them only the in-memory
cases run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks import _report, _suite
from benchmarks._case import Env
from benchmarks._timing import Budget

DEFAULT = Budget(duration_s=2.5, warmup_s=0.5, rounds=10)
QUICK = Budget(duration_s=0.3, warmup_s=0.1, rounds=2, warmup_full_pass=False)
_PACKAGES = (
    "ratewarden",
    "limits",
    "throttled-py",
    "pyrate-limiter",
    "redis",
    "hiredis",
    "pymemcache",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions() -> dict[str, str]:
    found = {}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _redis_info(url: str | None) -> dict[str, Any]:
    if url is None:
        return {}
    import redis

    with redis.Redis.from_url(url) as client:
        info = client.info("server")
    return {"redis_server": info.get("redis_version"), "redis_url": url}


def _memcached_command(url: str, request: bytes, expect: bytes) -> bytes:
    """Send one text-protocol request to the memcached at ``memcached://HOST:PORT``; the
    first line of its answer, which must start with ``expect``."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 11211), timeout=2) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0]
    if not line.startswith(expect):
        raise RuntimeError(f"memcached at {url} answered {line!r} to {request!r}")
    return line


def _memcached_info(url: str | None) -> dict[str, Any]:
    if url is None:
        return {}
    line = _memcached_command(url, b"version\r\n", b"VERSION ")
    return {"memcached_server": line[len(b"VERSION ") :].decode(), "memcached_url": url}


def meta(args: argparse.Namespace, budget: Budget) -> dict[str, Any]:
    try:
        import redis.utils

        hiredis = bool(redis.utils.HIREDIS_AVAILABLE)
    except ImportError:
        hiredis = False
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": args.command or shlex.join([sys.executable, "-m", "benchmarks", *sys.argv[1:]]),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pinning": args.pinning or "none",
        "budget": {
            "duration_s": budget.duration_s,
            "warmup_s": budget.warmup_s,
            "rounds": budget.rounds,
            "warmup_full_pass": budget.warmup_full_pass,
            "max_calls": budget.max_calls,
        },
        "hiredis_parser": hiredis,
        "versions": _versions(),
        "loadavg_start": list(os.getloadavg()),
        **_redis_info(args.redis_url),
        **_memcached_info(args.memcached_url),
    }


def _flusher(redis_url: str | None, memcached_url: str | None) -> Any:
    """Empty the server a group is about to use (``family`` is the group's name)."""
    if redis_url is None and memcached_url is None:
        return None
    client = None
    if redis_url is not None:
        import redis

        client = redis.Redis.from_url(redis_url)

    def flush(family: str) -> None:
        if family == "redis" and client is not None:
            client.flushall()
        elif family == "memcached" and memcached_url is not None:
            _memcached_command(memcached_url, b"flush_all\r\n", b"OK")

    return flush


def _progress(row: _suite.Row) -> None:
    rate = "-" if row.per_second is None else f"{row.per_second:,.0f}/s"
    print(
        f"  {row.backend:<15} {row.keys:>6,}  {row.label:<45} {rate:>14}  {row.status}",
        file=sys.stderr,
        flush=True,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short cases, for a smoke run")
    parser.add_argument("--redis-url", help="a redis-server to use (flushed between cases!)")
    parser.add_argument(
        "--memcached-url",
        metavar="memcached://HOST:PORT",
        help="a memcached to use (flushed between cases!)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        choices=["memory", "redis", "redis-async", "memcached", "memcached-async"],
        help="run only these backends (repeatable; the memcached group is "
        "--backend memcached --backend memcached-async)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(__file__).parent / "results",
        help="where the JSON goes (default: benchmarks/results)",
    )
    parser.add_argument(
        "--max-calls",
        type=int,
        metavar="N",
        help="time exactly N decisions per case, no warm-up (smoke tests)",
    )
    parser.add_argument("--pinning", help="how processes were pinned to CPUs (recorded)")
    parser.add_argument("--command", help="the command line to record (scripts/bench sets it)")
    parser.add_argument(
        "--http",
        action="store_true",
        help="run the HTTP middleware benchmark (benchmarks/_http.py) instead",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="start Redis Clusters of 1-3 primaries and run the Cluster "
        "benchmark (benchmarks/_cluster.py) instead",
    )
    parser.add_argument(
        "--cluster-clients",
        type=int,
        default=2,
        metavar="N",
        help="client processes for --cluster (default 2)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="run `ratewarden serve` on every gRPC transport under h2load, and behind Envoy "
        "(benchmarks/_serve.py) instead; starts its own redis-server",
    )
    parser.add_argument(
        "--rlqs",
        action="store_true",
        help="run no filter, the RLS filter and the RLQS filter through one Envoy over "
        "`ratewarden serve` (benchmarks/_rlqs.py) instead",
    )
    parser.add_argument(
        "--rlqs-fleet",
        action="store_true",
        help="run three Envoys sharing one quota limit while their demand moves, over one and "
        "two `ratewarden serve --rlqs` replicas on one redis-server "
        "(benchmarks/_rlqs_fleet.py) instead",
    )
    parser.add_argument(
        "--rlqs-demand-reports",
        type=int,
        default=2,
        metavar="N",
        help="the replicas' --rlqs-demand-reports for --rlqs-fleet (default 2)",
    )
    parser.add_argument(
        "--rlqs-change-rounds",
        type=int,
        default=1,
        metavar="K",
        help="the replicas' --rlqs-change-rounds for --rlqs-fleet (default 1)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.http:
        from benchmarks import _http

        return _http.main(args.redis_url, args.quick)
    if args.cluster:
        from benchmarks import _cluster

        return _cluster.main(args.quick, args.cluster_clients, args.results)
    if args.serve:
        from benchmarks import _serve

        command = args.command or shlex.join([sys.executable, "-m", "benchmarks", *sys.argv[1:]])
        return _serve.main(args.quick, args.results, command)
    if args.rlqs_fleet:
        from benchmarks import _rlqs_fleet

        command = args.command or shlex.join([sys.executable, "-m", "benchmarks", *sys.argv[1:]])
        return _rlqs_fleet.main(
            args.quick, args.results, command, args.rlqs_demand_reports, args.rlqs_change_rounds
        )
    if args.rlqs:
        from benchmarks import _rlqs

        command = args.command or shlex.join([sys.executable, "-m", "benchmarks", *sys.argv[1:]])
        return _rlqs.main(args.quick, args.results, command)
    budget = QUICK if args.quick else DEFAULT
    if args.max_calls is not None:
        if args.max_calls < 1:
            raise SystemExit("--max-calls must be at least 1")
        budget = Budget(
            duration_s=3_600.0,
            warmup_s=0.0,
            rounds=1,
            warmup_full_pass=False,
            max_calls=args.max_calls,
        )
    cases = [c for c in _suite.all_cases() if not args.backend or c.backend in args.backend]
    info = meta(args, budget)
    print(
        f"benchmarking {len(cases)} cases x {len(_suite.KEY_SETS)} key sets "
        f"({budget.duration_s:g} s each after {budget.warmup_s:g} s warm-up)",
        file=sys.stderr,
        flush=True,
    )
    rows = _suite.run(
        cases,
        Env(args.redis_url, args.memcached_url),
        budget,
        before_group=_flusher(args.redis_url, args.memcached_url),
        progress=_progress,
    )
    info["loadavg_end"] = list(os.getloadavg())
    found = _report.targets(rows, _suite.KEY_SETS)

    print()
    print(_report.table(rows))
    print()
    print("Targets (a report, not a test):")
    for target in found:
        print(f"  {target.line()}")
    notes = _report.cpu_notes(rows, _suite.KEY_SETS)
    if notes:
        print("Client CPU per decision on Redis (informational):")
        for note in notes:
            print(f"  {note}")

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"{stamp}.json", "latest.json"):
        _report.write_json(args.results / name, info, rows, found)
    (args.results / "latest.md").write_text(_report.markdown_run(info, rows, found))
    print(f"\nwrote {args.results / (stamp + '.json')} and latest.json / latest.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
