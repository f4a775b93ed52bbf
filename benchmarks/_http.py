"""HTTP middleware benchmark: requests/s of a minimal Starlette app behind uvicorn, on vs off.

``python -m benchmarks --http [--redis-url URL] [--quick]`` (``scripts/bench --http``).

Each server process (``PROCESSES`` of them; one with ``--quick``) serves every
variant, each on its own uvicorn server and free loopback port, with the same
one-route Starlette app:

- ``off``: no middleware (the baseline);
- ``headers-only``: a five-line ASGI middleware that adds the two RateLimit headers
  the ``memory`` variant sends (same names, same length), deciding nothing: what
  emitting the headers alone costs through uvicorn and h11;
- ``memory``: ``RateLimitMiddleware`` over ``AsyncLimiter(AsyncMemoryStore())``;
- ``redis``: over ``AsyncLimiter(AsyncRedisStore)`` (needs ``--redis-url``);
- ``two-tier``: over ``AsyncTwoTier(AsyncRedisStore, local=0.5, lease=10)`` (needs ``--redis-url``).

One rule, keyed by API key, generous enough that every request is allowed (the
cost measured is the allowed path, with the default RateLimit headers on).
The load comes from a separate process: a small asyncio HTTP/1.1 client with
``CONNECTIONS`` keep-alive connections, cycling over ``KEYS`` API keys, pinned
to the CPU(s) the benchmark itself may not use (``scripts/bench`` keeps the last
CPU for redis-server and the load generator, the others for the servers): a load
generator that shares the server's CPU adds its own time to every request and
evicts the server's caches between requests, which made the middleware's cost
look twice what it is (measured, docs/middleware.md). There it polls its sockets
without sleeping, at idle priority (see ``load``): a client that sleeps between
replies must be woken by each response, at the server's expense. Two processes
of the same code differ by up to 20% here, so every process serves every variant
and a variant is compared with ``off`` in the same process. A round loads each
process's variants one after the other, in orders that rotate from round to
round. A variant's ratio to ``off`` is the median over (round, process) of its
rate over ``off``'s in the same process and round, which cancels both the
process's luck and the slow drifts of a shared machine; the ratio of the medians
is given beside it, and each process's median. The table also gives the
server processes' own CPU time per request (user + system, from
``/proc/<pid>/stat``), which other load moves less: the work the middleware adds,
whatever the scheduler did. Redis's CPU is not in it.

A second table drives each variant's app object in this process, without a
server or a socket: synthetic ``http`` scopes for the same keys from
``CONNECTIONS`` concurrent tasks (so the Redis store pipelines as it does under
load), rounds of the variants interleaved, CPU time per request
(``time.process_time``). The
difference to ``off`` is the middleware's own cost per request (with the
store's client side), free of the server's and the scheduler's noise.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

VARIANTS = ("off", "headers-only", "memory", "redis", "two-tier")
LOCAL_VARIANTS = ("off", "headers-only", "memory")
CONNECTIONS = 32
#: Server processes per variant in a full run (see ``run``).
PROCESSES = 3
KEYS = 1000
HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0


def build_app(variant: str, redis_url: str | None) -> Any:
    """The benchmark app for ``variant``; imports stay inside (this runs in the server process)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    from ratewarden import AsyncLimiter, AsyncMemoryStore
    from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet, by_api_key

    async def hello(request: Request) -> Response:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/", hello)])
    if variant == "off":
        return app
    if variant == "headers-only":
        app.add_middleware(_HeadersOnly)
        return app
    limiter: Any
    if variant == "memory":
        limiter = AsyncLimiter(AsyncMemoryStore())
    else:
        from ratewarden.storage.redis import AsyncRedisStore

        store = AsyncRedisStore.from_url(str(redis_url), timeout=1.0)
        if variant == "redis":
            limiter = AsyncLimiter(store)
        else:
            from ratewarden.tiers import AsyncTwoTier

            limiter = AsyncTwoTier(store, local=0.5, lease=10)
    rules = RuleSet([Rule("contract", "1000000/minute", key=by_api_key())])
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=rules)
    return app


class _HeadersOnly:
    """Adds two fixed headers shaped as the ``memory`` variant's RateLimit headers."""

    HEADERS = (
        (b"ratelimit-policy", b'"contract";q=1000000;w=60'),
        (b"ratelimit", b'"contract";r=999999;t=1'),
    )

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *self.HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def serve(variants: list[str], ports: list[int], redis_url: str | None) -> None:
    """Serve each variant's app on its port, all in this process, until killed.

    One uvicorn server per variant, on one event loop: a request to a port meets
    that variant's app alone, and every variant shares this process's luck (its
    memory layout, where the host placed it), which the ratios then cancel.
    """
    import uvicorn

    async def main() -> None:
        servers = [
            uvicorn.Server(
                uvicorn.Config(
                    build_app(variant, redis_url),
                    host=HOST,
                    port=port,
                    log_level="warning",
                    access_log=False,
                    lifespan="off",
                    # Pinned, so runs compare: uvloop is installed with ratewarden[server]
                    # and uvicorn would take it (and httptools) on its own; see
                    # docs/middleware.md.
                    loop="asyncio",
                    http="h11",
                )
            )
            for variant, port in zip(variants, ports, strict=True)
        ]
        await asyncio.gather(*(server.serve() for server in servers))

    asyncio.run(main())


async def _worker(port: int, first: int, deadline: float, counts: Counter[int]) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    i = first
    try:
        while time.perf_counter() < deadline:
            key = f"key-{i % KEYS}".encode()
            i += CONNECTIONS
            writer.write(b"GET / HTTP/1.1\r\nHost: bench\r\nX-Api-Key: " + key + b"\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            counts[int(head[9:12])] += 1
    finally:
        writer.close()


async def _load(port: int, seconds: float, spin: bool = False) -> dict[str, Any]:
    counts: Counter[int] = Counter()
    if spin:
        # Keep a callback always ready: the loop polls its sockets without ever sleeping.
        loop = asyncio.get_running_loop()

        def again() -> None:
            loop.call_soon(again)

        loop.call_soon(again)
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(_worker(port, n, deadline, counts) for n in range(CONNECTIONS)))
    elapsed = time.perf_counter() - start
    return {"requests": sum(counts.values()), "seconds": elapsed, "statuses": dict(counts)}


def load(port: int, seconds: float, spin: bool = False) -> None:
    """Load generator process: print one JSON line of counts.

    ``spin``: poll without sleeping, at idle priority (``SCHED_IDLE``, so that a
    redis-server on the same CPU runs whenever it has work). A client asleep in
    ``epoll_wait`` must be woken by each response the server writes, and on
    loopback the server pays for that wake-up (on a VM, an interrupt to the other
    CPU): the slower the server, the more often its client sleeps, so every
    microsecond of server work came back amplified (measured, docs/middleware.md).
    Only for a load generator with a CPU of its own (``--cpus``).
    """
    if spin and hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    print(json.dumps(asyncio.run(_load(port, seconds, spin))))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {process.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start in {START_TIMEOUT_S} s")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _round(
    port: int, seconds: float, cpus: set[int] | None = None, spin: bool | None = None
) -> dict[str, Any]:
    """One load generator's run. ``cpus``: pin it there; ``spin`` (by default with ``cpus``,
    a CPU apart from the servers) polls without sleeping at idle priority (see ``load``)."""
    if spin is None:
        spin = cpus is not None
    pinned = [] if cpus is None else ["--cpus", ",".join(map(str, sorted(cpus)))]
    options = [*pinned, "--spin"] if spin else pinned
    command = [sys.executable, "-m", "benchmarks._http", "load", *options, str(port), str(seconds)]
    out = subprocess.run(command, check=True, capture_output=True, timeout=seconds + 30)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@dataclass
class HttpRow:
    """One variant's rounds.

    ``rates[r]`` is the mean over the server processes in round r; ``each[i]`` the
    rate of one process in one round, in the same (round, process) order for every
    variant, so that ``paired`` divides figures from the same process minutes apart.
    """

    variant: str
    rates: list[float]
    statuses: Counter[int]
    cpu_us: list[float]
    #: Each server process's median requests/s over the rounds.
    processes: list[float]
    each: list[float]
    #: Server CPU us per request of each (round, process), in ``each``'s order.
    cpu_each: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_us)

    def paired(self, base: HttpRow) -> float:
        """Median over (round, process) of this variant's rate over ``base``'s there."""
        return statistics.median(a / b for a, b in zip(self.each, base.each, strict=True))

    def cpu_paired(self, base: HttpRow) -> float:
        """Median over (round, process) of this variant's CPU per request over ``base``'s."""
        return statistics.median(a / b for a, b in zip(self.cpu_each, base.cpu_each, strict=True))


def load_cpus() -> set[int] | None:
    """The CPUs for the load generator: those this process may not use, when there are any.

    ``scripts/bench`` pins the benchmark (and so every server it starts) to all CPUs
    but the last, and redis-server to the last: the load generator goes there too,
    so that it never takes the server's CPU or evicts its caches between requests.
    None (no pinning) when this process may use every CPU.
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    mine = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - mine
    return others or None


def run(
    redis_url: str | None, seconds: float, rounds: int, warmup: float, processes: int = 1
) -> list[HttpRow]:
    """Start ``processes`` server processes, each serving every variant; interleave ``rounds``.

    Each process serves every variant on a port of its own (see ``serve``). A round
    loads each process's variants one after the other for ``seconds`` each, the
    processes and the variants in orders that rotate from round to round. Two
    processes of the same code differ by up to 20% on this kind of machine (the
    host, where memory landed; not address randomisation, which was ruled out), as
    much as the middleware's whole cost: a variant compared with ``off`` in another
    process counted that as the middleware's doing, and in the same process it
    cancels.
    """
    variants = [v for v in VARIANTS if redis_url is not None or v in LOCAL_VARIANTS]
    rows = {v: HttpRow(v, [], Counter(), [], [], [], []) for v in variants}
    cpus = load_cpus()
    started: list[tuple[dict[str, int], subprocess.Popen[bytes]]] = []
    try:
        for _ in range(processes):
            ports = {variant: _free_port() for variant in variants}
            command = [
                sys.executable,
                "-m",
                "benchmarks._http",
                "serve",
                ",".join(variants),
                ",".join(str(ports[v]) for v in variants),
            ]
            command += [redis_url] if redis_url else []
            started.append((ports, subprocess.Popen(command)))
        for ports, process in started:
            for port in ports.values():
                _wait_listening(port, process)
                _round(port, warmup, cpus)
        per_process: dict[str, list[list[float]]] = {v: [[] for _ in started] for v in variants}
        cpu_process: dict[str, list[list[float]]] = {v: [[] for _ in started] for v in variants}
        for r in range(rounds):
            in_round: dict[str, list[float]] = {v: [] for v in variants}
            cpu_round: dict[str, list[float]] = {v: [] for v in variants}
            for j in range(len(started)):
                k = (r + j) % len(started)
                ports, process = started[k]
                for i in range(len(variants)):
                    variant = variants[(r + i) % len(variants)]
                    cpu_before = _cpu_seconds(process.pid)
                    result = _round(ports[variant], seconds, cpus)
                    cpu = _cpu_seconds(process.pid) - cpu_before
                    rate = result["requests"] / result["seconds"]
                    cpu_us = cpu / max(1, result["requests"]) * 1e6
                    per_process[variant][k].append(rate)
                    cpu_process[variant][k].append(cpu_us)
                    in_round[variant].append(rate)
                    cpu_round[variant].append(cpu_us)
                    statuses = {int(code): n for code, n in result["statuses"].items()}
                    rows[variant].statuses.update(statuses)
            for variant in variants:
                rows[variant].rates.append(statistics.mean(in_round[variant]))
                rows[variant].cpu_us.append(statistics.mean(cpu_round[variant]))
            print(
                f"  round {r + 1}: "
                + ", ".join(f"{v} {rows[v].rates[-1]:,.0f}" for v in variants)
                + " req/s",
                file=sys.stderr,
                flush=True,
            )
        for variant in variants:
            for k in range(len(started)):
                rows[variant].processes.append(statistics.median(per_process[variant][k]))
            # The same (round, process) order for every variant: paired() divides like by like.
            rows[variant].each = [
                per_process[variant][k][r] for r in range(rounds) for k in range(len(started))
            ]
            rows[variant].cpu_each = [
                cpu_process[variant][k][r] for r in range(rounds) for k in range(len(started))
            ]
    finally:
        for _ports, process in started:
            process.kill()  # nothing to flush; uvicorn's own handlers stop one server of several
        for _ports, process in started:
            process.wait(10)
    return [rows[v] for v in variants]


def _scope(i: int) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"x-api-key", f"key-{i % KEYS}".encode())],
        "client": ("127.0.0.1", 40000 + i % CONNECTIONS),
        "server": (HOST, 8000),
    }


async def _drive(app: Any, scopes: list[dict[str, Any]], count: int) -> None:
    """``count`` requests from ``CONNECTIONS`` concurrent tasks, as the load generator sends."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    async def worker(first: int) -> None:
        for i in range(first, count, CONNECTIONS):
            await app(dict(scopes[i % len(scopes)]), receive, send)

    await asyncio.gather(*(worker(n) for n in range(CONNECTIONS)))


def in_process(redis_url: str | None, requests: int, rounds: int) -> dict[str, list[float]]:
    """CPU microseconds per request of each variant's app called directly, per round."""
    variants = [v for v in VARIANTS if redis_url is not None or v in LOCAL_VARIANTS]
    scopes = [_scope(i) for i in range(KEYS)]
    loop = asyncio.new_event_loop()
    try:
        apps = {v: build_app(v, redis_url) for v in variants}
        for app in apps.values():
            loop.run_until_complete(_drive(app, scopes, min(requests, 2000)))
        cpu: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(rounds):
            for variant in variants:
                start = time.process_time()
                loop.run_until_complete(_drive(apps[variant], scopes, requests))
                cpu[variant].append((time.process_time() - start) / requests * 1e6)
    finally:
        loop.close()
    return cpu


def in_process_table(cpu: dict[str, list[float]]) -> str:
    """Median and range of CPU us/request per variant, and the median's excess over ``off``."""
    base = statistics.median(cpu["off"])
    lines = [
        "| variant (in process) | CPU us/request (median) | rounds min-max | over off |",
        "|---|---:|---:|---:|",
    ]
    for variant, values in cpu.items():
        median = statistics.median(values)
        lines.append(
            f"| {variant} | {median:.1f} | {min(values):.1f}-{max(values):.1f} "
            f"| {median - base:+.1f} |"
        )
    return "\n".join(lines)


def table(rows: list[HttpRow]) -> str:
    """A markdown table: median req/s, rounds min-max, the ratios to ``off``, statuses seen."""
    base = next(r for r in rows if r.variant == "off")
    lines = [
        "| variant | req/s (median) | rounds min-max | per process | vs off (paired) "
        "| ratio of medians | server CPU us/req | CPU vs off (paired) | statuses |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        statuses = ", ".join(f"{k}: {v:,}" for k, v in sorted(row.statuses.items()))
        each = " / ".join(f"{rate:,.0f}" for rate in row.processes)
        lines.append(
            f"| {row.variant} | {row.median:,.0f} | {min(row.rates):,.0f}-{max(row.rates):,.0f} "
            f"| {each} | {row.paired(base):.2f} | {row.median / base.median:.2f} "
            f"| {row.cpu_median:,.0f} | {row.cpu_paired(base):.2f} | {statuses} |"
        )
    return "\n".join(lines)


#: Issue 4's targets: the least throughput, as a fraction of ``off``, each variant may keep.
TARGETS = {"memory": 0.90, "two-tier": 0.75}


def verdicts(rows: list[HttpRow]) -> str:
    """One line per target: the paired ratio, MET or MISS, and what the headers alone keep."""
    by_name = {row.variant: row for row in rows}
    base = by_name["off"]
    lines = []
    for variant, target in TARGETS.items():
        row = by_name.get(variant)
        if row is None:
            continue
        ratio = row.paired(base)
        verdict = "MET" if ratio >= target else "MISS"
        lines.append(
            f"{variant}: {ratio:.3f} of off (target >= {target:.2f}): {verdict}; "
            f"server CPU per request {row.cpu_paired(base):.3f}x off's"
        )
    if "headers-only" in by_name:
        lines.append(
            f"headers-only (the two headers, no decision): "
            f"{by_name['headers-only'].paired(base):.3f} of off"
        )
    return "\n".join(lines)


def main(redis_url: str | None, quick: bool) -> int:
    """Run the HTTP benchmark and print its table and the targets of issue 4."""
    seconds, rounds, warmup, processes = (1.0, 2, 0.3, 1) if quick else (1.0, 9, 1.0, PROCESSES)
    cpus = load_cpus()
    print(
        f"HTTP benchmark: {processes} server process(es) per variant, {CONNECTIONS} "
        f"connections, {rounds} rounds of {seconds:g} s per server after {warmup:g} s "
        f"warm-up; load generator "
        + (
            f"on CPU(s) {','.join(map(str, sorted(cpus)))}, polling at idle priority"
            if cpus
            else "not pinned, sleeping in epoll between replies"
        ),
        file=sys.stderr,
        flush=True,
    )
    rows = run(redis_url, seconds, rounds, warmup, processes)
    print(table(rows))
    print()
    print(verdicts(rows))
    requests, in_rounds = (500, 3) if quick else (4000, 15)
    print(f"\nIn process: {in_rounds} interleaved rounds of {requests:,} requests per variant\n")
    print(in_process_table(in_process(redis_url, requests, in_rounds)))
    print(
        "\nTargets (a report, not a test): memory middleware costs <= 10% of throughput; "
        "two-tier Redis <= 25%."
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(
            sys.argv[2].split(","),
            [int(port) for port in sys.argv[3].split(",")],
            sys.argv[4] if len(sys.argv) > 4 else None,
        )
    elif sys.argv[1] == "load":
        spin = False
        if sys.argv[2] == "--cpus":
            os.sched_setaffinity(0, {int(c) for c in sys.argv[3].split(",")})
            del sys.argv[2:4]
        if sys.argv[2] == "--spin":
            spin = True
            del sys.argv[2]
        load(int(sys.argv[2]), float(sys.argv[3]), spin)
    else:
        raise SystemExit("usage: python -m benchmarks --http [--redis-url URL] [--quick]")
