"""Several processes on one hot key (simulated as several limiters sharing the Cluster): the
bounds that hold for a fleet, and the one caveat the docs state (processes that disagree)."""

from __future__ import annotations

import math
import random
import threading

import pytest
import redis

from ratewarden import Limiter, Rate
from ratewarden.hotkeys import CellLimiter, HotKeyDetector, HotKeyLimiter
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

KEY = "tenant:fleet"


def test_threads_sharing_one_cell_limiter_never_pass_the_capacity(
    cluster_client: redis.RedisCluster,
) -> None:
    """Four threads, 150 requests each, frozen time, capacity 300: exactly 300 admitted (the
    round-robin count is shared, the cells drain together)."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    cells = CellLimiter(store, 3)
    rate = Rate(300, 60)
    allowed = [0] * 4

    def worker(i: int) -> None:
        allowed[i] = sum(cells.hit(KEY, rate).allowed for _ in range(150))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(allowed) <= 300
    assert sum(allowed) >= 300 - (3 - 2) * math.ceil(300 / 3)


def test_processes_with_their_own_pickers_keep_both_bounds(
    cluster_client: redis.RedisCluster,
) -> None:
    """Three limiters (three processes), each round-robin on its own count, requests arriving at
    random among them, frozen time: never more than C, and at the first denial at most
    (N - 2) * ceil(C / N) units unused."""
    capacity, cells = 60, 3
    rate = Rate(capacity, 60)
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    fleet = [CellLimiter(store, cells) for _ in range(3)]
    rng = random.Random(3)
    admitted = 0
    while rng.choice(fleet).hit(KEY, rate).allowed:
        admitted += 1
    assert capacity - admitted <= (cells - 2) * math.ceil(capacity / cells)
    more = sum(rng.choice(fleet).hit(KEY, rate).allowed for _ in range(100))
    assert admitted + more <= capacity


def test_processes_that_disagree_about_cells_may_admit_twice(
    cluster_client: redis.RedisCluster,
) -> None:
    """The documented caveat, shown: one process puts the key on cells, another does not; in
    frozen time they admit up to twice the capacity between them, and no more."""
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    rate = Rate(30, 60)
    on_cells = HotKeyLimiter(store, CellLimiter(store, 3), hot_keys=[KEY])
    plain = Limiter(store)
    admitted = sum(on_cells.hit(KEY, rate).allowed for _ in range(100))
    admitted += sum(plain.hit(KEY, rate).allowed for _ in range(100))
    assert admitted == 2 * 30


def test_detected_leases_in_several_processes_stay_within_processes_times_k_minus_one(
    cluster_client: redis.RedisCluster,
) -> None:
    """Three processes, each detecting on its own and moving the key to leases of k = 10 (the
    key's one state either way): in frozen time at most C + 3 x 9 admitted."""
    clock = ManualClock()
    store = RedisStore(cluster_client, clock=clock, timeout=1.0)
    rate = Rate(60, 60)
    fleet = [
        HotKeyLimiter(store, TwoTier(store, lease=10), detector=HotKeyDetector(5, clock=clock))
        for _ in range(3)
    ]
    admitted = sum(fleet[n % 3].hit(KEY, rate).allowed for n in range(300))
    assert all(limiter.is_hot(KEY) for limiter in fleet)
    assert 60 - 3 * 9 <= admitted <= 60 + 3 * 9
