"""What a decision costs on each path of ``ratewarden.tiers`` (the table in docs/two-tiers.md).

    .venv/bin/python -m benchmarks.tiers_costs

Starts its own redis-server on a free loopback port (the test fixtures' helper)
and, for the outage rows, a black-holing TCP proxy in front of it (the fault
tests' proxy). Every row is timed once per round, rounds interleaved, and the
median of the rounds printed: this process's wall time and CPU time
(``time.process_time``) per decision. No row is ever denied except the two that
measure denials. A standalone script, not a suite case: the suite's workload
never denies, and the tiers' interesting paths are denials and outages.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.storage.redis import RedisStore
from ratewarden.tiers import CircuitBreaker, TwoTier
from tests._servers import RedisServer
from tests.faults._proxy import Fault, FaultProxy

ROUNDS = 9
BIG = Rate.parse("1000000000/hour")  # never denies
SMALL = Rate.parse("10/hour")  # denied after ten


def once(decide: Callable[[], object], calls: int) -> tuple[float, float]:
    """Microseconds per call, wall and CPU."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        decide()
    return (time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


def table(rows: list[tuple[str, Callable[[], object], int]]) -> None:
    walls: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for _, decide, _ in rows:
        decide()
    for _ in range(ROUNDS):
        for name, decide, calls in rows:
            wall, cpu = once(decide, calls)
            walls[name].append(wall)
            cpus[name].append(cpu)
    for name, _, _ in rows:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")


def healthy(url: str) -> None:
    memory = MemoryStore()
    store = RedisStore.from_url(url, timeout=0.5)
    denied, local = TwoTier(store), TwoTier(store, local=Rate.parse("1/hour"))
    for _ in range(11):
        denied.hit("denied", SMALL)
    local.hit("local", BIG)
    limiter_m, tiers_m = Limiter(memory), TwoTier(memory)
    limiter_r, tiers_r, leased = Limiter(store), TwoTier(store), TwoTier(store, lease=10)
    table(
        [
            ("`Limiter`, memory store", lambda: limiter_m.hit("a", BIG), 4000),
            ("`TwoTier` (defaults), memory store", lambda: tiers_m.hit("b", BIG), 4000),
            ("`Limiter`, Redis", lambda: limiter_r.hit("c", BIG), 1000),
            ("`TwoTier` (defaults), Redis", lambda: tiers_r.hit("d", BIG), 1000),
            ("`TwoTier` with `lease=10`, Redis", lambda: leased.hit("e", BIG), 4000),
            ("`TwoTier`, negative cache hit", lambda: denied.hit("denied", SMALL), 4000),
            ("`TwoTier`, local bucket denial", lambda: local.hit("local", BIG), 4000),
        ]
    )
    store.close()


def outage(port: int) -> None:
    proxy = FaultProxy(port)
    store = RedisStore.from_url(proxy.url)  # the default timeout, 20 ms
    tiers = TwoTier(store, failure_mode="open", breaker=CircuitBreaker(failures=5, cooldown=3600.0))
    try:
        tiers.hit("x", BIG)
        proxy.set_fault(Fault.BLACKHOLE)
        wall, cpu = once(lambda: tiers.hit("x", BIG), 5)
        name = "black-holed Redis, each of the 5 calls that open the breaker"
        print(f"| {name} | {wall:.0f} | {cpu:.1f} |")
        table([("black-holed Redis, breaker open", lambda: tiers.hit("x", BIG), 4000)])
        print(f"\nstore calls during the outage: {tiers.counts.store_calls - 1}")
    finally:
        store.close()
        proxy.close()


def main() -> None:
    server = RedisServer()
    try:
        print("| path | wall µs | CPU µs |\n| --- | ---: | ---: |")
        healthy(server.url)
        outage(server.port)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
