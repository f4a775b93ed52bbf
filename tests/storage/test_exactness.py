"""Exact under contention: processes x threads hammering one key admit exactly the limit.

Every process uses the same ManualClock instant, so no capacity comes back
during the run and the count is exact whatever the interleaving. The store is
made (and used) in the parent before forking: each child must open its own
connections rather than share the parent's sockets.
"""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.queues import Queue

import pytest
import redis

from ratewarden import Rate
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock

pytestmark = pytest.mark.redis

PROCESSES, THREADS = 4, 8
LIMIT = Rate.parse("100/minute")


def hammer(store: RedisStore, hits_per_thread: int, out: Queue[tuple[int, int]]) -> None:
    allowed = [0] * THREADS
    errors = [0] * THREADS

    def run(index: int) -> None:
        for _ in range(hits_per_thread):
            try:
                allowed[index] += store.hit("gcra", "contended", LIMIT).allowed
            except Exception:
                errors[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put((sum(allowed), sum(errors)))


def run_contended(store: RedisStore, hits_per_thread: int) -> tuple[int, int]:
    context = multiprocessing.get_context("fork")
    out: Queue[tuple[int, int]] = context.Queue()
    processes = [
        context.Process(target=hammer, args=(store, hits_per_thread, out)) for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(10)
    return sum(r[0] for r in results), sum(r[1] for r in results)


def test_processes_and_threads_on_one_server_admit_exactly_the_limit(
    redis_client: redis.Redis,
) -> None:
    """4 processes x 8 threads x 20 hits against 100/minute: exactly 100 allowed, no errors."""
    store = RedisStore(redis_client, clock=ManualClock(), timeout=1.0)
    assert store.hit("gcra", "warm-up", LIMIT).allowed
    assert run_contended(store, hits_per_thread=20) == (100, 0)


@pytest.mark.cluster
def test_processes_and_threads_through_a_cluster_admit_exactly_the_limit(
    cluster_client: redis.RedisCluster,
) -> None:
    """The same through the Cluster client, 4 x 8 x 10 = 320 hits: exactly 100 allowed."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    assert store.hit("gcra", "warm-up", LIMIT).allowed
    assert run_contended(store, hits_per_thread=10) == (100, 0)
