"""A key listed in ``hot_keys`` keeps what it used on its own state: its first request in a
process carries that usage onto its cells, as a detected key's move does.

Before, a deploy that added a tenant to ``hot_keys`` mid-window handed it a fresh allowance
on the cells (50 of 100/minute used, then listed with 3 cells: 100 more; listed while its
limit was lowered to 30/minute: 30 more). A window's own state is named by its period, so
the lowered limit sees the count too, as a plain limiter's edit does. A second process, or a
second limiter's first request, charges nothing twice (the carry rounds each cell's share
up: up to ``cells - 1`` units fewer). Memory store and the 3-primary
Cluster, in ManualClock time.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.hotkeys import CellLimiter, HotKeyLimiter
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster

#: A minute's edge, so that the fixed windows of a test are whole.
START = 1_700_000_040


def make_store(kind: str, clock: ManualClock, request: pytest.FixtureRequest) -> Any:
    """A MemoryStore, or a RedisStore on the emptied 3-primary Cluster."""
    if kind == "memory":
        return MemoryStore(clock=clock)
    client: redis.RedisCluster = request.getfixturevalue("cluster_client")
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    return RedisStore(client, clock=clock, timeout=1.0)


def listed(store: Any, algorithm: str) -> HotKeyLimiter:
    cells = CellLimiter(store, 3, algorithm=algorithm)
    return HotKeyLimiter(store, cells, algorithm, hot_keys=["tenant"])


def spend(limiter: Any, rate: Rate, tries: int) -> int:
    return sum(limiter.hit("tenant", rate).allowed for _ in range(tries))


@pytest.mark.parametrize("kind", ["memory", "cluster"])
@pytest.mark.parametrize(
    ("algorithm", "edited"),
    [("fixed_window", 0), ("sliding_window", 0), ("sliding_log", 0), ("gcra", 30)],
)
def test_a_key_listed_mid_window_keeps_its_usage(
    kind: str, algorithm: str, edited: int, request: pytest.FixtureRequest
) -> None:
    """50 of 100/minute spent on the key's own state; listed: 50 more at 100/minute (less
    the rounding), and a second process of the same list charges nothing twice. Listed at
    30/minute instead: a window is full at once (its count goes on), a bucket starts afresh
    at its new rate, as a plain limiter's edit does."""
    clock = ManualClock(START)
    store = make_store(kind, clock, request)
    hundred, thirty = Rate(100, 60), Rate(30, 60)
    assert spend(Limiter(store, algorithm), hundred, 50) == 50
    assert spend(listed(store, algorithm), hundred, 30) == 30
    # 20 left, less what the carry rounds up (a share per cell, up to cells - 1 units).
    assert 18 <= spend(listed(store, algorithm), hundred, 100) <= 20

    clock = ManualClock(START + 600)
    store = make_store(kind, clock, request)
    assert spend(Limiter(store, algorithm), hundred, 50) == 50
    assert spend(listed(store, algorithm), thirty, 60) == edited


def test_a_listed_key_is_decided_on_its_cells_with_its_own_primary_down(
    own_cluster: RedisCluster,
) -> None:
    """The carry peeks the key's own state, on a primary the cells are there to spare: with
    that primary stopped, the listed key's requests are still decided on a healthy cell
    (its usage there is left behind), not failed at every request."""
    clock = ManualClock(START)
    admin = own_cluster.client()
    store = RedisStore.from_url(own_cluster.url, clock=clock, timeout=1.0)
    try:
        victim = admin.get_node_from_key("tenant")
        probe = CellLimiter(store, 3, algorithm="fixed_window")
        healthy = [
            i for i, cell in enumerate(probe.keys("tenant"))
            if admin.get_node_from_key(cell).name != victim.name
        ]  # fmt: skip
        assert healthy
        cells = CellLimiter(store, 3, algorithm="fixed_window", picker=lambda n: healthy[0])
        hot = HotKeyLimiter(store, cells, "fixed_window", hot_keys=["tenant"])
        next(node for node in own_cluster.nodes if node.port == victim.port).stop()
        decisions = [hot.hit("tenant", Rate(90, 60)) for _ in range(3)]
        assert [(d.allowed, d.degraded) for d in decisions] == [(True, "")] * 3
    finally:
        store.close()
