"""``python -m benchmarks --cluster``: decisions per second on 1, 2 and 3 Cluster primaries.

Two scenarios, each against Redis Clusters this module starts on loopback
(persistence off) and stops:

1. **Scaling.** The same fixed client load (``--cluster-clients`` processes, each
   an asyncio loop with ``CONCURRENCY`` tasks over ``AsyncRedisStore``, 10,000
   keys round-robin, a rate no call reaches) against a Cluster of 1, 2 and 3
   primaries. Reported: decisions per second and each primary's share of the
   EVALSHA calls (``INFO commandstats``).
2. **Hot key.** Every request on one key, limited to ``HOT_RATE``, from the same
   client processes (blocking ``RedisStore``), on 3 primaries: without
   mitigation, with 3 cells (``CellLimiter``), and with leases of ``LEASE``
   units (``TwoTier``). Reported: decisions and admissions per second and the
   EVALSHA calls per primary.

Everything (clients and every redis-server) shares this machine's CPUs: on 2
cores the figures say how far one machine gets, not how a Cluster of real
hosts scales. The machine's load average is printed before and after.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from ratewarden import Rate
from ratewarden.decision import Decision
from ratewarden.hotkeys import CellLimiter, HotKeyDetector
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.tiers import TwoTier

HOST = "127.0.0.1"
SLOTS = 16384
KEYS = 10_000
CONCURRENCY = 64
COLD_RATE = Rate(1_000_000_000, 3_600)
HOT_RATE = Rate.parse("2000/second", burst=200)
LEASE = 30
#: The hot-key runs: no mitigation, 3 cells (with and without their negative cache), leases.
HOT_MODES = ("none", "cells", "cells-no-cache", "leases")
TIMEOUT_S = 1.0
#: Seconds from launching the clients to their common start (a spawned process imports first).
START_DELAY_S = 3.0


class Cluster:
    """``primaries`` redis-server nodes in cluster mode, slots split evenly, no replicas.

    Built with CLUSTER ADDSLOTSRANGE and CLUSTER MEET rather than ``redis-cli
    --cluster create``, which refuses fewer than 3 primaries.
    """

    def __init__(self, primaries: int) -> None:
        self.ports: list[int] = []
        self.dirs: list[Path] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []
        try:
            for _ in range(primaries):
                self._start_node()
            self._join(primaries)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis+cluster://{HOST}:{self.ports[0]}"

    def _start_node(self) -> None:
        port = _free_port()
        path = Path(tempfile.mkdtemp(prefix=f"rw-bench-cluster-{port}-"))
        args = [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(port),
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(path),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ]
        log = open(path / "redis.log", "wb")  # noqa: SIM115 - the process owns it until stop()
        self.logs.append(log)
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))
        self.ports.append(port)
        self.dirs.append(path)
        _wait(lambda: _ping(port), f"redis-server on {port} did not start")

    def _join(self, primaries: int) -> None:
        for i, port in enumerate(self.ports):
            start, end = i * SLOTS // primaries, (i + 1) * SLOTS // primaries - 1
            with redis.Redis(host=HOST, port=port) as client:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", start, end)
                for other in self.ports[:i]:
                    client.execute_command("CLUSTER", "MEET", HOST, other)
        _wait(self._ok, "the cluster did not reach cluster_state:ok")

    def _ok(self) -> bool:
        for port in self.ports:
            with redis.Redis(host=HOST, port=port) as client:
                info = client.execute_command("CLUSTER", "INFO").decode()
                if (
                    "cluster_state:ok" not in info
                    or f"cluster_known_nodes:{len(self.ports)}" not in info
                ):
                    return False
        return True

    def reset_stats(self) -> None:
        for port in self.ports:
            with redis.Redis(host=HOST, port=port) as client:
                client.config_resetstat()

    def evalsha_calls(self) -> list[int]:
        """EVALSHA calls per primary since the last reset (``INFO commandstats``)."""
        found = []
        for port in self.ports:
            with redis.Redis(host=HOST, port=port) as client:
                stats = client.info("commandstats").get("cmdstat_evalsha", {})
            found.append(int(stats.get("calls", 0)))
        return found

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(5)
        for log in self.logs:
            log.close()
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)


def _free_port() -> int:
    while True:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port + 10000 < 65536:
            with socket.socket() as bus:
                try:
                    bus.bind((HOST, port + 10000))
                except OSError:
                    continue
            return port


def _ping(port: int) -> bool:
    try:
        with redis.Redis(host=HOST, port=port, socket_timeout=0.5) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def _wait(ready: Callable[[], bool], message: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(message)
        time.sleep(0.05)


# -- the client processes: each reports (decisions, admitted) made in ``duration`` seconds


def _cold_worker(url: str, start: float, duration: float, offset: int, out: Any) -> None:
    out.put(asyncio.run(_cold_loop(url, start, duration, offset)))


def _until(start: float) -> None:
    """Wait for the shared start time (wall clock), so every client measures the same window."""
    time.sleep(max(0.0, start - time.time()))


async def _cold_loop(url: str, start: float, duration: float, offset: int) -> tuple[int, int]:
    store = AsyncRedisStore.from_url(url, timeout=TIMEOUT_S)
    keys = [f"user:{n}" for n in range(KEYS)]
    await store.hit("gcra", keys[0], COLD_RATE)  # connect and load the slot table
    _until(start)
    deadline = time.perf_counter() + duration
    counts = [0, 0]

    async def task(start: int) -> None:
        n = start
        while time.perf_counter() < deadline:
            decision = await store.hit("gcra", keys[n % KEYS], COLD_RATE)
            counts[0] += 1
            counts[1] += decision.allowed
            n += CONCURRENCY

    await asyncio.gather(*(task(offset + i) for i in range(CONCURRENCY)))
    await store.aclose()
    return counts[0], counts[1]


def _hot_worker(url: str, start: float, duration: float, mode: str, out: Any) -> None:
    store = RedisStore.from_url(url, timeout=TIMEOUT_S)
    decide: Callable[[], Decision]
    if mode.startswith("cells"):
        cells = CellLimiter(store, 3, negative_cache=None if mode.endswith("no-cache") else 10_000)
        decide = lambda: cells.hit("tenant:hot", HOT_RATE)  # noqa: E731
    elif mode == "leases":
        tier = TwoTier(store, lease=LEASE)
        decide = lambda: tier.hit("tenant:hot", HOT_RATE)  # noqa: E731
    else:
        decide = lambda: store.hit("gcra", "tenant:hot", HOT_RATE)  # noqa: E731
    decide()
    _until(start)
    decisions = admitted = 0
    deadline = time.perf_counter() + duration
    while time.perf_counter() < deadline:
        admitted += decide().allowed
        decisions += 1
    store.close()
    out.put((decisions, admitted))


def _run_clients(
    target: Callable[..., None], url: str, duration: float, per_client: list[Any]
) -> list[Any]:
    """One process per item of ``per_client``, running ``target(url, start, duration, item,
    queue)`` from a common start time; their reports."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = time.time() + START_DELAY_S
    procs = [
        ctx.Process(target=target, args=(url, start, duration, item, out)) for item in per_client
    ]
    for proc in procs:
        proc.start()
    found = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(10)
    return found


def scaling(duration: float, clients: int, rounds: int) -> list[dict[str, Any]]:
    """Decisions per second for the fixed client load on 1, 2 and 3 primaries.

    The three clusters run side by side and take turns, round after round, so
    load from elsewhere on the machine falls on all three alike; each row has
    the median and range of its rounds.
    """
    clusters = {}
    per_round: dict[int, list[float]] = {1: [], 2: [], 3: []}
    calls: dict[int, list[int]] = {}
    try:
        for primaries in (1, 2, 3):
            clusters[primaries] = Cluster(primaries)
        for _ in range(rounds):
            for primaries, cluster in clusters.items():
                cluster.reset_stats()
                results = _run_clients(_cold_worker, cluster.url, duration, list(range(clients)))
                per_round[primaries].append(sum(r[0] for r in results) / duration)
                calls[primaries] = cluster.evalsha_calls()
    finally:
        for cluster in clusters.values():
            cluster.stop()
    return [
        {
            "primaries": primaries,
            "per_second_median": statistics.median(found),
            "per_second_rounds": [round(x) for x in found],
            "evalsha_share_last_round": [
                round(c / max(1, sum(calls[primaries])), 3) for c in calls[primaries]
            ],
        }
        for primaries, found in per_round.items()
    ]


def hot_key(duration: float, clients: int) -> list[dict[str, Any]]:
    """One key at full client speed on 3 primaries: plain, cells, leases."""
    rows = []
    cluster = Cluster(3)
    try:
        for mode in HOT_MODES:
            with redis.RedisCluster(host=HOST, port=cluster.ports[0]) as client:
                client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
            cluster.reset_stats()
            results = _run_clients(_hot_worker, cluster.url, duration, [mode] * clients)
            calls = cluster.evalsha_calls()
            decisions, admitted = sum(r[0] for r in results), sum(r[1] for r in results)
            rows.append(
                {
                    "mitigation": mode,
                    "decisions": decisions,
                    "per_second": decisions / duration,
                    "admitted_per_second": admitted / duration,
                    "allowance_per_second": HOT_RATE.limit + HOT_RATE.capacity / duration,
                    "evalsha_per_primary": calls,
                }
            )
    finally:
        cluster.stop()
    return rows


def detector_cost(calls: int) -> dict[str, float]:
    """Nanoseconds per ``HotKeyDetector.record``: one key, and 10,000 keys in turn (64 counters,
    so nearly every call evicts: the sketch's worst case)."""
    found = {}
    for name, keys in (
        ("one key", ["tenant:hot"]),
        ("10,000 keys", [f"k{n}" for n in range(KEYS)]),
    ):
        detector = HotKeyDetector(1_000_000, capacity=64)
        started = time.perf_counter()
        for n in range(calls):
            detector.record(keys[n % len(keys)])
        found[name] = (time.perf_counter() - started) / calls * 1e9
    return found


def main(quick: bool = False, clients: int = 2, results: Path | None = None) -> int:
    """Run both scenarios, print them, write ``results/cluster-latest.json``."""
    duration = 0.5 if quick else 5.0
    rounds = 1 if quick else 3
    load_start = os.getloadavg()
    print(
        f"cluster benchmark: {clients} client processes, {duration:g} s per run, "
        f"{os.cpu_count()} CPUs shared by clients and servers; loadavg {load_start}",
        flush=True,
    )
    scale = scaling(duration, clients, rounds)
    print(f"\nScaling (fixed client load: {clients} x {CONCURRENCY} asyncio tasks, 10,000 keys;")
    print(f"  median of {rounds} rounds, the clusters taking turns):")
    print(f"  {'primaries':>9} {'decisions/s':>12}  {'rounds':<26} EVALSHA share per primary")
    for row in scale:
        print(
            f"  {row['primaries']:>9} {row['per_second_median']:>12,.0f}  "
            f"{row['per_second_rounds']!s:<26} {row['evalsha_share_last_round']}"
        )
    hot = hot_key(duration, clients)
    allowance = HOT_RATE.limit + HOT_RATE.capacity / duration
    print(f"\nHot key ({HOT_RATE}, 3 primaries, blocking RedisStore per client; the key may")
    print(f"  admit {allowance:,.0f}/s over {duration:g} s from rest):")
    print(f"  {'mitigation':<14} {'decisions/s':>12} {'admitted/s':>11}  EVALSHA per primary")
    for row in hot:
        print(
            f"  {row['mitigation']:<14} {row['per_second']:>12,.0f} "
            f"{row['admitted_per_second']:>11,.0f}  {row['evalsha_per_primary']}"
        )
    sketch = detector_cost(20_000 if quick else 200_000)
    print("\nHotKeyDetector.record, in this process:")
    for name, ns in sketch.items():
        print(f"  {name:<12} {ns:>8,.0f} ns per call")
    load_end = os.getloadavg()
    print(f"\nloadavg at the end {load_end}")
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "clients": clients,
        "duration_s": duration,
        "concurrency_per_client": CONCURRENCY,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "scaling": scale,
        "hot_key": hot,
        "detector_ns_per_record": sketch,
    }
    target = results or Path(__file__).parent / "results"
    target.mkdir(parents=True, exist_ok=True)
    (target / "cluster-latest.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {target / 'cluster-latest.json'}")
    return 0
