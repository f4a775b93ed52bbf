"""``python -m benchmarks --serve``: ``ratewarden serve`` under gRPC load, and behind Envoy.

What it measures (issue 3, "Benchmark"; docs/performance-serve.md has a run):

1. **ShouldRateLimit calls per second and per-call latency p50/p99** with 1, 3
   and 10 descriptors per call, at a fixed number of calls in flight (16, 64),
   against ``ratewarden serve`` processes this module starts: the memory store
   with ``--workers 1``, and Redis (a redis-server started here on a free
   loopback port, persistence off) with ``--workers 1`` and ``--workers 2``.
   Every limit is far out of reach, so every call is allowed; the ``deny`` rows
   send 3 descriptors of which the last is over its limit on every other call.
   Beside them: Redis with ``--charge-denied`` (one store pass per call), and
   the gRPC floor, ratewarden's ``GrpcServer`` answering a fixed response.
2. **What Envoy's rate limit filter costs per HTTP request**: one Envoy
   (``--concurrency 1``) with three listeners in front of a trivial upstream:
   no rate limit filter (``off``), the filter asking the memory server, and the
   filter asking the Redis server (``--workers 1``); three descriptors per
   request, Envoy's default 20 ms call timeout, ``failure_mode_deny: false``;
   1 and 16 requests in flight.
3. **The service without gRPC**: ``RateLimitServer.should_rate_limit`` called
   in this process (memory store), CPU per call (``in_process``).

The load comes from ``LOADERS`` separate processes (``benchmarks/_serve_load.py``),
each an asyncio loop with its share of the calls in flight. Rounds of every
case are interleaved in a rotating order, so load from elsewhere on the
machine falls on all of them; a row gives the median and range of its rounds'
rates, and latency percentiles over every call of every round. The CPU time of
the serve process tree, of redis-server, of Envoy and of the load generators
over the timed windows, per call, says what each call cost whatever the
scheduler did meanwhile.

Everything (load generators, ratewarden, redis-server, Envoy, the upstream)
shares this machine's CPUs; the machine's CPU count and load average are
recorded with the results.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._serve_stack import (
    ENVOY_DOMAIN,
    HOST,
    EnvoyStack,
    Loaders,
    Serve,
    envoy,
    floor,
    redis_server,
    serve,
    tree_cpu_s,
)

LOADERS = 2
#: gRPC connections per load generator (distinct subchannels): spread over serve workers.
CHANNELS = 2
DESCRIPTORS = (1, 3, 10)
IN_FLIGHT = (16, 64)
DOMAIN = "bench"
#: Envoy rows: 1 request in flight (nothing queues: what the filter adds to one request) and 16.
ENVOY_IN_FLIGHT = (1, 16)
#: The target of issue 3: Redis, 3 descriptors, at least this many calls/s at p99 <= P99_MS.
TARGET_CALLS = 5_000
TARGET_P99_MS = 5.0
_HIGH = "{unit: second, requests_per_unit: 1000000000}"

#: The rule files, one per domain: no limit here is ever reached except ``tight``'s ``hot-*``
#: values, 1 an hour each (the ``deny`` rows). Descriptor keys are ``d0`` ... ``d9``.
RULES = {
    f"{DOMAIN}.yaml": "\n".join(
        [
            f"domain: {DOMAIN}",
            "descriptors:",
            *(f"  - key: d{i}\n    rate_limit: {_HIGH}" for i in range(10)),
            "  - key: tight\n    value: hot-*",
            "    rate_limit: {unit: hour, requests_per_unit: 1}",
            f"  - key: tight\n    rate_limit: {_HIGH}",
            "",
        ]
    ),
    f"{ENVOY_DOMAIN}.yaml": "\n".join(
        [
            f"domain: {ENVOY_DOMAIN}",
            "descriptors:",
            *(f"  - key: {key}\n    rate_limit: {_HIGH}" for key in ("api_key", "tenant", "route")),
            "",
        ]
    ),
}


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run: which servers, cases and Envoy variants, how long, how many rounds."""

    seconds: float = 2.0
    warmup: float = 0.5
    rounds: int = 5
    redis: bool = True
    envoy: bool = True
    descriptors: tuple[int, ...] = DESCRIPTORS
    in_flight: tuple[int, ...] = IN_FLIGHT
    deny: bool = True
    floor: bool = True
    #: Also Redis with ``--charge-denied`` (3 descriptors): one store round trip per call.
    charge_denied: bool = True
    loaders: int = LOADERS


@dataclass(frozen=True, slots=True)
class Case:
    """One row: a server (``memory-w1``, ``redis-w1``, ``redis-w2``) or an Envoy listener."""

    server: str
    descriptors: int
    in_flight: int
    deny: bool = False
    envoy: str = ""  # "", or the listener: "off", "memory", "redis"

    @property
    def label(self) -> str:
        if self.envoy:
            return f"envoy filter {self.envoy}"
        if self.server == "floor":
            return f"grpc floor {self.descriptors} desc"
        if self.server == "redis-w1-cd":
            return f"redis-w1 {self.descriptors} desc --charge-denied"
        return f"{self.server} {self.descriptors} desc{' deny' if self.deny else ''}"


@dataclass(slots=True)
class Row:
    """A case's rounds, pooled."""

    case: Case
    rates: list[float] = field(default_factory=list)
    latencies: array[int] = field(default_factory=lambda: array("q"))
    calls: int = 0
    errors: int = 0
    denied: int = 0
    first_error: str | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)
    envoy_stats: dict[str, int] = field(default_factory=dict)

    def percentile_ms(self, fraction: float) -> float:
        """Nearest-rank percentile over every timed call, in milliseconds."""
        ordered = sorted(self.latencies)
        if not ordered:
            return float("nan")
        rank = max(1, -(-len(ordered) * fraction // 1))
        return ordered[int(rank) - 1] / 1e6

    def cpu_us(self, name: str) -> float | None:
        """CPU microseconds of process group ``name`` per call, over every round."""
        if name not in self.cpu_s or self.calls == 0:
            return None
        return self.cpu_s[name] / self.calls * 1e6

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    def to_json(self) -> dict[str, Any]:
        c = self.case
        return {
            "label": c.label,
            "server": c.server,
            "descriptors": c.descriptors,
            "in_flight": c.in_flight,
            "deny": c.deny,
            "envoy": c.envoy or None,
            "per_second_median": self.median,
            "per_second_rounds": self.rates,
            "calls": self.calls,
            "p50_ms": self.percentile_ms(0.50),
            "p99_ms": self.percentile_ms(0.99),
            "errors": self.errors,
            "denied": self.denied,
            "first_error": self.first_error,
            "cpu_us_per_call": {name: self.cpu_us(name) for name in self.cpu_s},
            "envoy_ratelimit_stats": self.envoy_stats or None,
        }


# --- the run ----------------------------------------------------------------------------


def cases(plan: Plan) -> list[Case]:
    servers = ["memory-w1", *(["redis-w1", "redis-w2"] if plan.redis else [])]
    found = [
        Case(server, n, in_flight)
        for server in servers
        for n in plan.descriptors
        for in_flight in plan.in_flight
    ]
    if plan.deny:
        found += [Case(server, 3, max(plan.in_flight), deny=True) for server in servers[:2]]
    if plan.floor:
        found += [Case("floor", 3, in_flight) for in_flight in plan.in_flight]
    if plan.redis and plan.charge_denied:
        found += [Case("redis-w1-cd", 3, in_flight) for in_flight in plan.in_flight]
    if plan.envoy:
        found += [
            Case("envoy", 3, in_flight, envoy=variant)
            for in_flight in ENVOY_IN_FLIGHT
            for variant in ("off", "memory", *(["redis"] if plan.redis else []))
        ]
    return found


@dataclass
class _Running:
    serves: dict[str, Serve]
    redis_pid: int | None
    envoy: EnvoyStack | None
    loaders: Loaders


def _command(case: Case, running: _Running) -> dict[str, Any]:
    if case.envoy:
        assert running.envoy is not None
        return {"kind": "http", "port": running.envoy.listeners[case.envoy]}
    target = f"{HOST}:{running.serves[case.server].grpc_port}"
    return {
        "kind": "grpc",
        "target": target,
        "domain": DOMAIN,
        "channels": CHANNELS,
        "descriptors": case.descriptors,
        "deny": case.deny,
        "statuses": 0 if case.server == "floor" else case.descriptors,
    }


def _cpu_groups(case: Case, running: _Running) -> dict[str, list[int]]:
    """The processes whose CPU a row reports: the serve tree, redis-server, Envoy, the load."""
    groups: dict[str, list[int]] = {"load": [proc.pid for proc in running.loaders.procs]}
    server = case.envoy if case.envoy else case.server
    if server in ("memory", "redis"):
        server = f"{server}-w1"
    if server in running.serves:
        groups["serve"] = [running.serves[server].pid]
    if running.redis_pid is not None and server.startswith("redis"):
        groups["redis"] = [running.redis_pid]
    if case.envoy and running.envoy is not None:
        groups["envoy"] = [running.envoy.pid]
    return groups


def _cpu(pids: list[int]) -> float:
    return sum(tree_cpu_s(pid) for pid in pids)


def _round(row: Row, running: _Running, plan: Plan) -> None:
    case = row.case
    groups = _cpu_groups(case, running)
    start_at = time.time() + plan.warmup
    running.loaders.send(_command(case, running), case.in_flight, plan.seconds, start_at)
    # CPU and Envoy's counters are read at the edges of the timed window (this process
    # sleeps meanwhile), so the warm-up is not in them.
    _sleep_until(start_at)
    before_stats = running.envoy.ratelimit_stats(case.envoy) if running.envoy and case.envoy else {}
    before = {name: _cpu(pids) for name, pids in groups.items()}
    _sleep_until(start_at + plan.seconds)
    for name, pids in groups.items():
        row.cpu_s[name] = row.cpu_s.get(name, 0.0) + _cpu(pids) - before[name]
    if case.envoy and running.envoy is not None:
        after = running.envoy.ratelimit_stats(case.envoy)
        for name, value in after.items():
            row.envoy_stats[name] = row.envoy_stats.get(name, 0) + value - before_stats.get(name, 0)
    replies = running.loaders.collect()
    rate = 0.0
    for reply in replies:
        row.latencies.extend(reply["latencies"])
        row.calls += reply["calls"]
        row.errors += reply["errors"]
        row.denied += reply["denied"]
        row.first_error = row.first_error or reply["first_error"]
        if reply["elapsed_s"] > 0:
            rate += reply["calls"] / reply["elapsed_s"]
    row.rates.append(rate)


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def run(plan: Plan, progress: Callable[[int, Row], None] | None = None) -> list[Row]:
    """Start everything the plan needs, interleave its rounds, stop everything; the rows."""
    rows = [Row(case) for case in cases(plan)]
    with ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="rw-bench-serve-"))
        stack.callback(shutil.rmtree, workdir, True)
        (workdir / "rules").mkdir()
        for name, text in RULES.items():
            (workdir / "rules" / name).write_text(text)
        serves = {"memory-w1": serve(stack, workdir, "memory-w1", "memory", 1)}
        if plan.floor:
            serves["floor"] = floor(stack, workdir)
        redis_pid = None
        if plan.redis:
            url = redis_server(stack, workdir)
            redis_pid = _pid_on(url)
            for workers in (1, 2):
                serves[f"redis-w{workers}"] = serve(
                    stack, workdir, f"redis-w{workers}", url, workers
                )
            if plan.charge_denied:
                serves["redis-w1-cd"] = serve(
                    stack, workdir, "redis-w1-cd", url, 1, "--charge-denied"
                )
        envoy_stack = None
        if plan.envoy:
            services = {"memory": serves["memory-w1"].grpc_port}
            if plan.redis:
                services["redis"] = serves["redis-w1"].grpc_port
            envoy_stack = envoy(stack, workdir, services)
        running = _Running(serves, redis_pid, envoy_stack, Loaders(stack, plan.loaders, workdir))
        for r in range(plan.rounds):
            for i in range(len(rows)):
                row = rows[(r + i) % len(rows)]
                _round(row, running, plan)
                if progress is not None:
                    progress(r, row)
    return rows


def _pid_on(url: str) -> int:
    import redis

    with redis.Redis.from_url(url) as client:
        return int(client.info("server")["process_id"])


def in_process(
    descriptors: Sequence[int], calls: int, rounds: int, in_flight: int = 16
) -> dict[int, list[float]]:
    """CPU microseconds per call of ``RateLimitServer.should_rate_limit`` called directly.

    The composition root of ``ratewarden serve`` with the benchmark rules and the
    memory store (metrics hooks on), without gRPC: ``in_flight`` tasks, requests
    decoded up front, rounds of the descriptor counts interleaved. Set against
    the serve rows' CPU per call, it splits the service's cost from the transport's.
    """
    import asyncio

    from envoy.service.ratelimit.v3 import rls_pb2

    from benchmarks._serve_load import rls_requests
    from ratewarden.server.app import RateLimitServer
    from ratewarden.server.settings import Settings

    found: dict[int, list[float]] = {n: [] for n in descriptors}
    with tempfile.TemporaryDirectory(prefix="rw-bench-serve-") as workdir:
        for name, text in RULES.items():
            (Path(workdir) / name).write_text(text)
        server = RateLimitServer(Settings(config_paths=(workdir,), reload_interval=0))
        requests = {
            n: [rls_pb2.RateLimitRequest.FromString(b) for b in rls_requests(DOMAIN, n, False)]
            for n in descriptors
        }

        async def drive(batch: list[Any], count: int) -> None:
            async def task(first: int) -> None:
                for i in range(first, count, in_flight):
                    await server.should_rate_limit(batch[i % len(batch)])

            await asyncio.gather(*(task(i) for i in range(in_flight)))

        async def main() -> None:
            for n in descriptors:
                await drive(requests[n], min(calls, 1_000))  # warm-up: every counter exists
            for _ in range(rounds):
                for n in descriptors:
                    start = time.process_time()
                    await drive(requests[n], calls)
                    found[n].append((time.process_time() - start) / calls * 1e6)

        asyncio.run(main())
    return found


# --- the report -------------------------------------------------------------------------

_HEADERS = (
    "case",
    "in flight",
    "calls/s (median)",
    "rounds min-max",
    "p50 ms",
    "p99 ms",
    "denied",
    "errors",
    "serve CPU us/call",
    "redis CPU us/call",
    "envoy CPU us/call",
    "load CPU us/call",
)


def _cells(row: Row) -> list[str]:
    def cpu(name: str) -> str:
        value = row.cpu_us(name)
        return "-" if value is None else f"{value:,.0f}"

    rates = f"{min(row.rates):,.0f}-{max(row.rates):,.0f}" if row.rates else "-"
    return [
        row.case.label, str(row.case.in_flight), f"{row.median:,.0f}", rates,
        f"{row.percentile_ms(0.5):.2f}", f"{row.percentile_ms(0.99):.2f}",
        f"{row.denied:,}", f"{row.errors:,}", cpu("serve"), cpu("redis"), cpu("envoy"),
        cpu("load"),
    ]  # fmt: skip


def markdown(rows: Sequence[Row]) -> str:
    """The table as Markdown."""
    lines = ["| " + " | ".join(_HEADERS) + " |", "|---|" + "---:|" * (len(_HEADERS) - 1)]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in rows]
    return "\n".join(lines)


def table(rows: Sequence[Row]) -> str:
    """The table as plain text."""
    cells = [list(_HEADERS), *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_HEADERS))]
    out = []
    for n, line in enumerate(cells):
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def targets(rows: Sequence[Row]) -> list[str]:
    """Issue 3's target, per Redis row with 3 descriptors (a report, not a test)."""
    found = []
    for row in rows:
        c = row.case
        if c.envoy or c.deny or not c.server.startswith("redis") or c.descriptors != 3:
            continue
        p99 = row.percentile_ms(0.99)
        verdict = "PASS" if row.median >= TARGET_CALLS and p99 <= TARGET_P99_MS else "MISS"
        found.append(
            f"{c.label}, {c.in_flight} in flight: {row.median:,.0f} calls/s "
            f"at p99 {p99:.2f} ms (target >= {TARGET_CALLS:,}/s at p99 <= {TARGET_P99_MS:g} ms) "
            f"{verdict}"
        )
    return found


def envoy_notes(rows: Sequence[Row]) -> list[str]:
    """Each filter variant's p50/p99 and throughput against ``off`` at the same requests in
    flight, and Envoy's filter counters (``error``: the call failed or passed the 20 ms
    timeout, and the request went on, ``failure_mode_allowed``)."""
    offs = {r.case.in_flight: r for r in rows if r.case.envoy == "off"}
    notes = []
    for row in rows:
        off = offs.get(row.case.in_flight)
        if not row.case.envoy or row.case.envoy == "off" or off is None:
            continue
        p50 = row.percentile_ms(0.5) - off.percentile_ms(0.5)
        p99 = row.percentile_ms(0.99) - off.percentile_ms(0.99)
        notes.append(
            f"filter -> {row.case.envoy}, {row.case.in_flight} in flight: "
            f"p50 {p50:+.2f} ms, p99 {p99:+.2f} ms, "
            f"requests/s x{row.median / off.median:.2f} of off; Envoy's ratelimit counters "
            f"{row.envoy_stats}"
        )
    return notes


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "rows": [row.to_json() for row in rows],
        "targets": targets(rows),
        "envoy": envoy_notes(rows),
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def meta(plan: Plan, command: str) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "plan": {
            "seconds": plan.seconds, "warmup": plan.warmup, "rounds": plan.rounds,
            "loaders": plan.loaders, "channels_per_loader": CHANNELS,
        },
        "loadavg_start": list(os.getloadavg()),
    }  # fmt: skip


def _progress(r: int, row: Row) -> None:
    print(
        f"  round {r + 1}: {row.case.label:<28} x{row.case.in_flight:<3} {row.rates[-1]:>9,.0f}/s",
        file=sys.stderr,
        flush=True,
    )


def main(quick: bool, results: Path, command: str) -> int:
    """Run the serve benchmark; print the table, the target and Envoy's cost; write JSON."""
    plan = Plan(seconds=0.5, warmup=0.3, rounds=1) if quick else Plan()
    info = meta(plan, command)
    print(
        f"serve benchmark: {len(cases(plan))} cases, {plan.rounds} rounds of {plan.seconds:g} s "
        f"each after {plan.warmup:g} s warm-up, {plan.loaders} load generator processes; "
        f"{os.cpu_count()} CPUs shared by all; loadavg {info['loadavg_start']}",
        file=sys.stderr,
        flush=True,
    )
    rows = run(plan, _progress)
    info["loadavg_end"] = list(os.getloadavg())
    print()
    print(table(rows))
    print("\nTarget (a report, not a test):")
    for line in targets(rows):
        print(f"  {line}")
    calls, rounds = (300, 2) if quick else (3_000, 5)
    service = in_process(plan.descriptors, calls, rounds)
    info["in_process_cpu_us_per_call"] = service
    print(
        f"\nThe service without gRPC (in process, memory store, {rounds} rounds of {calls:,} "
        "calls): CPU us/call, median (min-max)"
    )
    for n, values in service.items():
        print(
            f"  {n:>2} descriptors: {statistics.median(values):,.0f} "
            f"({min(values):,.0f}-{max(values):,.0f})"
        )
    print("\nEnvoy's rate limit filter, against no filter:")
    for line in envoy_notes(rows):
        print(f"  {line}")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"serve-{stamp}.json", "serve-latest.json"):
        write_json(results / name, info, rows)
    (results / "serve-latest.md").write_text(markdown(rows) + "\n")
    print(f"\nwrote {results / f'serve-{stamp}.json'}, serve-latest.json and serve-latest.md")
    return 0
