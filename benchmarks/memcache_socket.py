"""The memcache store over loopback TCP against a Unix socket (docs/storage.md).

    .venv/bin/python -m benchmarks.memcache_socket [ALTERNATIONS]

Starts two memcached servers of its own (``tests._memcached.MemcachedServer``): one on a
loopback port, one on a Unix socket. Then, alternating between them ``ALTERNATIONS``
times (5), one process makes GCRA hits over 50 keys through a ``Limiter`` on the blocking
``MemcacheStore``: 500 of warm-up, then five rounds of 5,000, keeping the best round's rate
and CPU per hit. Prints each pair and the socket's rate over TCP's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks._case import TIMEOUT_S
from ratewarden import Limiter, Rate
from ratewarden.storage.memcache import MemcacheStore
from tests._memcached import MemcachedServer, short_dir

KEYS = 50
CALLS = 5_000
ROUNDS = 5


def measure(url: str) -> tuple[float, float]:
    """The best round's hits a second and CPU microseconds a hit through ``url``."""
    store = MemcacheStore.from_url(url, timeout=TIMEOUT_S)  # generous: a pause is not an error
    limiter = Limiter(store, "gcra")
    rate = Rate.parse("100000000/minute")
    try:
        for i in range(500):
            limiter.hit(f"k{i % KEYS}", rate)
        best_rate, best_cpu = 0.0, float("inf")
        for _ in range(ROUNDS):
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(CALLS):
                limiter.hit(f"k{i % KEYS}", rate)
            best_rate = max(best_rate, CALLS / (time.perf_counter() - wall))
            best_cpu = min(best_cpu, (time.process_time() - cpu) / CALLS * 1e6)
        return best_rate, best_cpu
    finally:
        store.close()


def main(alternations: int) -> None:
    with short_dir() as directory:
        run(alternations, directory / "mc.sock")


def run(alternations: int, socket_path: Path) -> None:
    tcp = MemcachedServer()
    unix = MemcachedServer(unix_socket=socket_path)
    try:
        ratios = []
        for n in range(alternations):
            tcp_rate, tcp_cpu = measure(tcp.url)
            unix_rate, unix_cpu = measure(unix.url)
            ratios.append(unix_rate / tcp_rate)
            print(
                f"{n + 1}: TCP {tcp_rate:,.0f} hits/s ({tcp_cpu:.1f} us CPU a hit), "
                f"Unix socket {unix_rate:,.0f} ({unix_cpu:.1f} us): {ratios[-1]:.2f}x",
                flush=True,
            )
        ratios.sort()
        middle = ratios[len(ratios) // 2]
        print(f"socket over TCP: {ratios[0]:.2f}-{ratios[-1]:.2f}x, median {middle:.2f}x")
    finally:
        tcp.stop()
        unix.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
