"""Requests that arrive while a key's usage is carried onto its cells (or back) wait for
the carry: in one process, threads and tasks on the key are held until the move is made.

Before, a second thread (or task) found the key already routed to its cells while the first
was still carrying: its hits landed on the cells between the carry's peek of them and its
charge, and the carry, charging what the cells lacked, counted them as carried. Every such
hit was free: a key at 50 of 100/minute, listed, admitted 58-80 more from 8 threads, not
50. The 3-primary Cluster, in ManualClock time (nothing returns by time while a test runs).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

START = 1_700_000_040
HUNDRED = Rate(100, 60)


def _threads(limiter: Any, n: int, each: int) -> int:
    admitted: list[int] = []
    start = threading.Barrier(n)

    def run() -> None:
        start.wait()
        admitted.append(sum(limiter.hit("tenant", HUNDRED).allowed for _ in range(each)))

    workers = [threading.Thread(target=run) for _ in range(n)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert len(admitted) == n
    return sum(admitted)


def test_threads_on_a_listed_key_wait_for_its_carry(cluster_client: redis.RedisCluster) -> None:
    """50 of 100/minute used on the key's own state; listed, 8 threads x 20 hits: 50 more at
    most (the carry rounds each cell's share up, so up to 2 fewer), never more."""
    store = RedisStore(cluster_client, clock=ManualClock(START), timeout=2.0)
    assert (
        sum(Limiter(store, "fixed_window").hit("tenant", HUNDRED).allowed for _ in range(50)) == 50
    )
    cells = CellLimiter(store, 3, algorithm="fixed_window")
    listed = HotKeyLimiter(store, cells, "fixed_window", hot_keys=["tenant"])
    assert 48 <= _threads(listed, 8, 20) <= 50


def test_threads_on_a_detected_key_wait_for_its_move(cluster_client: redis.RedisCluster) -> None:
    """Detected hot at its 20th unit with 20 used: 8 threads x 20 hits admit 100 in all at
    most (80 more, up to 2 fewer for the rounding)."""
    clock = ManualClock(START)
    store = RedisStore(cluster_client, clock=clock, timeout=2.0)
    detector = HotKeyDetector(19, interval=1.0, clock=clock)
    cells = CellLimiter(store, 3, algorithm="fixed_window")
    limiter = HotKeyLimiter(store, cells, "fixed_window", detector=detector)
    assert sum(limiter.hit("tenant", HUNDRED).allowed for _ in range(19)) == 19
    assert not limiter.is_hot("tenant")
    assert 79 <= _threads(limiter, 8, 20) <= 81


async def test_tasks_on_a_listed_key_wait_for_its_carry(async_client: aredis.RedisCluster) -> None:
    """The asyncio twin: 40 tasks started in one turn, 50 used before; 50 more at most."""
    store = AsyncRedisStore(async_client, clock=ManualClock(START), timeout=2.0)
    plain = AsyncLimiter(store, "fixed_window")
    assert sum([(await plain.hit("tenant", HUNDRED)).allowed for _ in range(50)]) == 50
    cells = AsyncCellLimiter(store, 3, algorithm="fixed_window")
    listed = AsyncHotKeyLimiter(store, cells, "fixed_window", hot_keys=["tenant"])

    async def two() -> int:
        return sum([(await listed.hit("tenant", HUNDRED)).allowed for _ in range(2)])

    admitted = await asyncio.gather(*(two() for _ in range(40)))
    assert 48 <= sum(admitted) <= 50
    await store.aclose()
