"""``python -m benchmarks --serve``: ``ratewarden serve`` on every gRPC transport under
h2load, and behind Envoy.

What it measures (issue 17, "Benchmark targets"; docs/performance-serve.md has a run):

1. **ShouldRateLimit calls per second and per-call latency p50/p99** with 1, 3
   and 10 descriptors per call, at 16 and 64 calls in flight, against
   ``ratewarden serve`` processes this module starts, one set per transport
   (``--transport grpcio`` and ``--transport native``): the memory store with
   ``--workers 1``, and Redis (a redis-server started here on a free loopback
   port, persistence off) with ``--workers 1`` and ``--workers 2`` (the workers
   share the port; more than one needs Redis). Every limit is far out of reach,
   so every call is allowed; the ``deny`` rows send 3 descriptors of which the
   last is over its limit, so every call is denied (the over-limit cache
   answers). Beside them, the gRPC floor: ratewarden's gRPC server on each
   transport answering a fixed response.
2. **What Envoy's rate limit filter costs per HTTP request**: one Envoy
   (``--concurrency 1``) in front of a trivial upstream, a listener without the
   filter (``off``) and one per store and transport whose filter asks that
   ``--workers 1`` service; three descriptors per request, Envoy's default
   20 ms call timeout, ``failure_mode_deny: false``; 1 and 16 requests in flight.
3. **The service without gRPC**: ``RateLimitServer.should_rate_limit`` called
   in this process (memory store), CPU per call (``in_process``).

The load is h2load (``benchmarks/_h2load.py``), a C client, started for each
round: ``GRPC_CONNECTIONS`` HTTP/2 connections (so ``--workers 2`` gets calls
on both workers) carrying the row's calls in flight, every call with the same
request body; Envoy's rows over HTTP/1.1, a connection per request in flight.
A round is a warm-up run, one real call checked (the gRPC reply decoded, or
through Envoy the filter's counter), the timed run, and the check again. A
round whose check fails is recorded as failed, without figures; one whose
replies carried too few bytes to all be replies counts the missing ones as
errors. Rounds of every case are interleaved in a rotating order, a case's
transports beside each other, so load from elsewhere on the machine falls on
all of them; a row gives the median and range of its rounds. The CPU time of
the serve process tree, redis-server, Envoy, its upstream and h2load over each
timed run, per call, says what each call cost whatever the scheduler did
meanwhile.

Everything (h2load, ratewarden, redis-server, Envoy, the upstream) shares this
machine's CPUs; the machine's CPU count and load average are recorded with the
results. The report (``_serve_report.py``) prints the table, each native row's
ratio to its grpcio twin in the same rounds, and which issue-17 targets the run
met.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks import _h2load, _serve_report
from benchmarks._serve_load import Checker, grpc_frame, rls_requests
from benchmarks._serve_stack import (
    ENVOY_DOMAIN,
    ENVOY_HEADERS,
    HOST,
    EnvoyStack,
    Serve,
    envoy,
    floor,
    redis_server,
    serve,
    tree_cpu_s,
)

TRANSPORTS = ("grpcio", "native")
DESCRIPTORS = (1, 3, 10)
IN_FLIGHT = (16, 64)
#: HTTP/2 connections per gRPC round; the calls in flight are spread over them.
GRPC_CONNECTIONS = 4
DOMAIN = "bench"
#: Envoy rows: 1 request in flight (nothing queues: what the filter adds to one request) and 16.
ENVOY_IN_FLIGHT = (1, 16)
#: A round whose replies carried fewer DATA bytes per call than this share of the checked
#: reply's frame had calls answered with a gRPC error (``_h2load.Run.replies``).
MIN_REPLY_SHARE = 0.75
_HIGH = "{unit: second, requests_per_unit: 1000000000}"
#: A token budget no call empties (``in_process(..., budget_hits=N)`` asks ``b0`` ... ``b9``).
_BUDGET = "{unit: second, tokens_per_unit: 1000000000}"

#: The rule files, one per domain: no limit here is ever reached except ``tight``'s ``hot-*``
#: values, 1 an hour each (the ``deny`` rows). Descriptor keys are ``d0`` ... ``d9``.
RULES = {
    f"{DOMAIN}.yaml": "\n".join(
        [
            f"domain: {DOMAIN}",
            "descriptors:",
            *(f"  - key: d{i}\n    rate_limit: {_HIGH}" for i in range(10)),
            *(f"  - key: b{i}\n    budget: {_BUDGET}" for i in range(10)),
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
    """What to run: which transports, servers, cases and Envoy variants, how long, how often."""

    seconds: float = 2.0
    warmup: float = 0.5
    rounds: int = 5
    transports: tuple[str, ...] = TRANSPORTS
    redis: bool = True
    envoy: bool = True
    descriptors: tuple[int, ...] = DESCRIPTORS
    in_flight: tuple[int, ...] = IN_FLIGHT
    deny: bool = True
    floor: bool = True


@dataclass(frozen=True, slots=True)
class Case:
    """One row: a server (``memory-w1``, ``redis-w1``, ``redis-w2``, ``floor``) on a transport,
    or an Envoy listener (``off``, or the store whose ``-w1`` service its filter asks)."""

    server: str
    transport: str  # "grpcio" or "native"; "" for Envoy without the filter
    descriptors: int
    in_flight: int
    deny: bool = False
    envoy: str = ""  # "", or the listener: "off", "memory", "redis"

    @property
    def label(self) -> str:
        if self.envoy:
            return "envoy, no filter" if self.envoy == "off" else f"envoy filter -> {self.envoy}"
        if self.server == "floor":
            return f"grpc floor {self.descriptors} desc"
        return f"{self.server} {self.descriptors} desc{' deny' if self.deny else ''}"

    @property
    def twin(self) -> Case:
        """The same case on the grpcio transport: what the ratios divide by."""
        return replace(self, transport="grpcio")

    @property
    def service(self) -> str:
        """The key of the process that answers the calls (``Running.serves``); "" for none."""
        if self.envoy:
            return f"{self.envoy}-w1/{self.transport}" if self.transport else ""
        return f"{self.server}/{self.transport}"


@dataclass(frozen=True, slots=True)
class Round:
    """One timed run of a case."""

    rate: float
    p50_ms: float
    p99_ms: float
    calls: int
    errors: int
    #: CPU microseconds per call of each process group (serve, redis, envoy, upstream, h2load).
    cpu_us: dict[str, float]
    #: Envoy's ``ratelimit.*`` counters over the run (Envoy rows with the filter).
    envoy_stats: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Row:
    """A case's rounds."""

    case: Case
    rounds: list[Round] = field(default_factory=list)
    first_error: str | None = None

    def _median(self, values: Sequence[float]) -> float:
        present = [v for v in values if not math.isnan(v)]
        return statistics.median(present) if present else float("nan")

    @property
    def rates(self) -> list[float]:
        return [r.rate for r in self.rounds]

    @property
    def median(self) -> float:
        """Median calls/s over the rounds."""
        return self._median(self.rates)

    def p(self, which: str) -> list[float]:
        """Each round's ``p50`` or ``p99``, in ms."""
        return [getattr(r, f"{which}_ms") for r in self.rounds]

    def p_median(self, which: str) -> float:
        return self._median(self.p(which))

    def cpu_us(self, name: str) -> list[float]:
        """Each round's CPU microseconds per call of process group ``name``."""
        return [r.cpu_us[name] for r in self.rounds if name in r.cpu_us]

    def cpu_median(self, name: str) -> float | None:
        values = self.cpu_us(name)
        return statistics.median(values) if values else None

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.rounds)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.rounds)

    @property
    def envoy_stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for r in self.rounds:
            for name, value in r.envoy_stats.items():
                total[name] = total.get(name, 0) + value
        return total


# --- the run ----------------------------------------------------------------------------


def cases(plan: Plan) -> list[Case]:
    """Every row of ``plan``, each case's transports side by side."""
    servers = ["memory-w1", *(["redis-w1", "redis-w2"] if plan.redis else [])]
    found = []
    for server in servers:
        for n in plan.descriptors:
            for in_flight in plan.in_flight:
                found += [Case(server, t, n, in_flight) for t in plan.transports]
    if plan.deny:
        found += [
            Case(server, t, 3, max(plan.in_flight), deny=True)
            for server in servers[:2]
            for t in plan.transports
        ]
    if plan.floor:
        found += [Case("floor", t, 3, n) for n in plan.in_flight for t in plan.transports]
    if plan.envoy:
        stores = ["memory", *(["redis"] if plan.redis else [])]
        for in_flight in ENVOY_IN_FLIGHT:
            found.append(Case("envoy", "", 3, in_flight, envoy="off"))
            found += [
                Case("envoy", t, 3, in_flight, envoy=store)
                for store in stores
                for t in plan.transports
            ]
    return found


@dataclass
class _Running:
    serves: dict[str, Serve]
    redis_pid: int | None
    envoy: EnvoyStack | None
    workdir: Path
    checker: Checker
    #: Per (descriptors, deny): the serialized request and the file of its gRPC frame.
    bodies: dict[tuple[int, bool], tuple[bytes, Path]] = field(default_factory=dict)

    def body(self, descriptors: int, deny: bool) -> tuple[bytes, Path]:
        key = (descriptors, deny)
        if key not in self.bodies:
            message = rls_requests(DOMAIN, descriptors, deny, values=1)[0]
            path = self.workdir / f"request-{descriptors}{'-deny' if deny else ''}.bin"
            path.write_bytes(grpc_frame(message))
            self.bodies[key] = (message, path)
        return self.bodies[key]


def _load(case: Case, running: _Running) -> _h2load.Load:
    if case.envoy:
        assert running.envoy is not None
        port = running.envoy.listeners[_listener(case.envoy, case.transport)]
        return _h2load.Load(f"http://{HOST}:{port}/", case.in_flight, 1, headers=ENVOY_HEADERS)
    connections = math.gcd(case.in_flight, GRPC_CONNECTIONS)
    port = running.serves[case.service].grpc_port
    url = f"http://{HOST}:{port}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    _, body = running.body(case.descriptors, case.deny)
    return _h2load.Load(url, connections, case.in_flight // connections, body=body)


def _listener(store: str, transport: str) -> str:
    return store if store == "off" else f"{store}-{transport}"


def _check(case: Case, running: _Running) -> int:
    """One real call, checked (``RuntimeError`` if wrong); a gRPC reply frame's size."""
    if case.envoy:
        assert running.envoy is not None
        running.envoy.check(_listener(case.envoy, case.transport))
        return 0
    message, _ = running.body(case.descriptors, case.deny)
    port = running.serves[case.service].grpc_port
    statuses = 0 if case.server == "floor" else case.descriptors
    return running.checker.call(port, message, statuses, over_limit=case.deny)


def _cpu_groups(case: Case, running: _Running) -> dict[str, int]:
    """The processes whose CPU a row reports (h2load's comes from its own rusage)."""
    groups: dict[str, int] = {}
    if case.service:
        groups["serve"] = running.serves[case.service].pid
    if running.redis_pid is not None and case.service.startswith("redis"):
        groups["redis"] = running.redis_pid
    if case.envoy and running.envoy is not None:
        groups["envoy"] = running.envoy.pid
        groups["upstream"] = running.envoy.upstream_pid
    return groups


def _failed(row: Row, error: str) -> None:
    """A server that answered wrongly: its round counts as failed, no figures."""
    row.first_error = row.first_error or error[:300]
    row.rounds.append(Round(0.0, math.nan, math.nan, 0, 1, {}))


def _round(row: Row, running: _Running, plan: Plan) -> None:
    case = row.case
    load = _load(case, running)
    output = running.workdir / "h2load.out"
    log = running.workdir / "h2load.log"
    if plan.warmup > 0:
        _h2load.finish(_h2load.start(load, plan.warmup, None, output), plan.warmup, None, output)
    try:
        frame = _check(case, running)
    except RuntimeError as exc:
        _failed(row, f"before the round: {exc}")
        return
    groups = _cpu_groups(case, running)
    variant = _listener(case.envoy, case.transport) if case.envoy else ""
    before_stats = running.envoy.ratelimit_stats(variant) if running.envoy and variant else {}
    before = {name: tree_cpu_s(pid) for name, pid in groups.items()}
    proc = _h2load.start(load, plan.seconds, log, output)
    run = _h2load.finish(proc, plan.seconds, log, output)
    cpu = {name: tree_cpu_s(pid) - before[name] for name, pid in groups.items()}
    cpu["h2load"] = run.cpu_s
    stats: dict[str, int] = {}
    if running.envoy is not None and variant:
        after = running.envoy.ratelimit_stats(variant)
        stats = {name: value - before_stats.get(name, 0) for name, value in after.items()}
    try:
        _check(case, running)
    except RuntimeError as exc:
        _failed(row, f"after the round: {exc}")
        return
    errors = run.failed + stats.get("error", 0)
    if frame and run.calls and run.replies(frame) < MIN_REPLY_SHARE:
        # Calls answered 200 with no reply message: gRPC errors in the trailers.
        short = run.calls - round(run.data_bytes / frame)
        errors += short
        row.first_error = row.first_error or (
            f"about {short:,} of {run.calls:,} calls carried no reply (a gRPC error in the "
            f"trailers): {run.data_bytes:,} bytes of DATA, a reply is {frame}"
        )
    if run.failed and row.first_error is None:
        row.first_error = f"h2load: {run.failed:,} requests failed:\n{run.output[-600:]}"
    row.rounds.append(
        Round(
            rate=run.rate,
            p50_ms=run.percentile_ms(0.50),
            p99_ms=run.percentile_ms(0.99),
            calls=run.calls,
            errors=errors,
            cpu_us={name: s / run.calls * 1e6 for name, s in cpu.items()} if run.calls else {},
            envoy_stats=stats,
        )
    )


def run(plan: Plan, progress: Callable[[int, Row], None] | None = None) -> list[Row]:
    """Start everything the plan needs, interleave its rounds, stop everything; the rows."""
    _h2load.binary()  # fail before starting anything when there is no h2load
    rows = [Row(case) for case in cases(plan)]
    with ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="rw-bench-serve-"))
        stack.callback(shutil.rmtree, workdir, True)
        (workdir / "rules").mkdir()
        for name, text in RULES.items():
            (workdir / "rules" / name).write_text(text)
        serves: dict[str, Serve] = {}
        redis_pid = None
        url = None
        if plan.redis:
            url = redis_server(stack, workdir)
            redis_pid = _pid_on(url)
        for t in plan.transports:
            serves[f"memory-w1/{t}"] = serve(stack, workdir, f"memory-w1 {t}", "memory", 1, t)
            if url is not None:
                for workers in (1, 2):
                    name = f"redis-w{workers}"
                    serves[f"{name}/{t}"] = serve(stack, workdir, f"{name} {t}", url, workers, t)
            if plan.floor:
                serves[f"floor/{t}"] = floor(stack, workdir, t)
        envoy_stack = None
        if plan.envoy:
            services = {
                _listener(store, t): serves[f"{store}-w1/{t}"].grpc_port
                for store in ("memory", "redis")
                for t in plan.transports
                if f"{store}-w1/{t}" in serves
            }
            envoy_stack = envoy(stack, workdir, services)
        checker = Checker()
        stack.callback(checker.close)
        running = _Running(serves, redis_pid, envoy_stack, workdir, checker)
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
    descriptors: Sequence[int],
    calls: int,
    rounds: int,
    in_flight: int = 16,
    store: str = "memory",
    budget_hits: int | None = None,
    budgets: int | None = None,
) -> dict[int, list[float]]:
    """CPU microseconds per call of ``RateLimitServer.should_rate_limit`` called directly.

    The composition root of ``ratewarden serve`` with the benchmark rules and ``store``
    (a store URL; a Redis one at a 0.5 s timeout), metrics hooks on, without gRPC: ``in_flight``
    tasks, requests decoded up front, rounds of the descriptor counts interleaved. Set against
    the serve rows' CPU per call, it splits the service's cost from the transport's. With
    ``budget_hits`` the descriptors are token budget rules' (``b0`` ...), each asking for that
    many hits: 0 is a budget check, more a charge (docs/budgets.md); with ``budgets`` too,
    only the first ``budgets`` descriptors of a call are (a budget beside request limits).
    """
    import asyncio

    from envoy.service.ratelimit.v3 import rls_pb2

    from ratewarden.server.app import RateLimitServer
    from ratewarden.server.settings import Settings

    found: dict[int, list[float]] = {n: [] for n in descriptors}
    with tempfile.TemporaryDirectory(prefix="rw-bench-serve-") as workdir:
        for name, text in RULES.items():
            (Path(workdir) / name).write_text(text)
        timeout = 0.02 if store == "memory" else 0.5
        settings = Settings(
            config_paths=(workdir,), reload_interval=0, store_url=store, store_timeout=timeout
        )
        requests = {
            n: [rls_pb2.RateLimitRequest.FromString(b) for b in rls_requests(DOMAIN, n, False)]
            for n in descriptors
        }
        if budget_hits is not None:
            for batch in requests.values():
                for request in batch:
                    for d in request.descriptors[:budgets]:
                        d.entries[0].key = "b" + d.entries[0].key[1:]
                        d.hits_addend.value = budget_hits

        async def drive(server: RateLimitServer, batch: list[Any], count: int) -> None:
            async def task(first: int) -> None:
                for i in range(first, count, in_flight):
                    await server.should_rate_limit(batch[i % len(batch)])

            await asyncio.gather(*(task(i) for i in range(in_flight)))

        async def main() -> None:
            server = RateLimitServer(settings)  # on the loop its Redis connections belong to
            for n in descriptors:
                await drive(server, requests[n], min(calls, 1_000))  # warm-up: every counter exists
            for _ in range(rounds):
                for n in descriptors:
                    start = time.process_time()
                    await drive(server, requests[n], calls)
                    found[n].append((time.process_time() - start) / calls * 1e6)
            await server.store.aclose()

        asyncio.run(main())
    return found


def _progress(r: int, row: Row) -> None:
    last = row.rounds[-1]
    print(
        f"  round {r + 1}: {row.case.label:<24} {row.case.transport or '-':<7} "
        f"x{row.case.in_flight:<3} {last.rate:>9,.0f}/s  p99 {last.p99_ms:6.2f} ms"
        f"{f'  errors {last.errors:,}' if last.errors else ''}",
        file=sys.stderr,
        flush=True,
    )


def main(quick: bool, results: Path, command: str) -> int:
    """Run the serve benchmark; print the table, the targets and Envoy's cost; write JSON."""
    from ratewarden.server.settings import native_installed

    try:
        _h2load.binary()
    except RuntimeError as exc:
        print(f"python -m benchmarks --serve: {exc}", file=sys.stderr)
        return 1
    transports = TRANSPORTS if native_installed() else ("grpcio",)
    plan = (
        Plan(seconds=0.5, warmup=0.2, rounds=1, transports=transports)
        if quick
        else Plan(transports=transports)
    )
    info = _serve_report.meta(plan, command, GRPC_CONNECTIONS)
    print(
        f"serve benchmark: {len(cases(plan))} cases on {', '.join(transports)}, {plan.rounds} "
        f"rounds of {plan.seconds:g} s each after {plan.warmup:g} s of warm-up load, h2load "
        f"as the load; {os.cpu_count()} CPUs shared by all; loadavg {info['loadavg_start']}",
        file=sys.stderr,
        flush=True,
    )
    code = info["code"]
    if code["src_changed"]:
        print(
            f"note: measuring {code['commit']} with uncommitted changes in src/: "
            f"{', '.join(code['src_changed'])}",
            file=sys.stderr,
        )
    if transports != TRANSPORTS:
        print(
            "note: the native transport is not installed (pip install 'ratewarden[native]'): "
            "grpcio only, and no target can be met",
            file=sys.stderr,
        )
    rows = run(plan, _progress)
    info["loadavg_end"] = list(os.getloadavg())
    print()
    print(_serve_report.table(rows))
    print("\nIssue 17's targets (a report, not a test):")
    for target in _serve_report.targets(rows):
        print(target.text())
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
    for line in _serve_report.envoy_notes(rows):
        print(f"  {line}")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"serve-{stamp}.json", "serve-latest.json"):
        _serve_report.write_json(results / name, info, rows)
    (results / "serve-latest.md").write_text(_serve_report.markdown(rows) + "\n")
    print(f"\nwrote {results / f'serve-{stamp}.json'}, serve-latest.json and serve-latest.md")
    return 0
