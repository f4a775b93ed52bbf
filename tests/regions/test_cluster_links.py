"""Faults on the links between Cluster regions: each peer Cluster reached through a proxy
per node (``_cluster_links.ClusterLink``), then cut off, reset or black-holed.

What the server tests show for one proxy per region, here for a Cluster per region: a round
that cannot read a peer Cluster names it, merges what arrived and leaves the cap as it was;
once the link is back the next round completes; and a region cut off from its peers while
they still read it is held at its budget. The windows follow a ManualClock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from ratewarden.rate import Rate
from ratewarden.regions import AsyncReconciledBudget, ReconciledBudget
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster
from tests.faults._proxy import Fault
from tests.regions._cluster_links import ClusterLink
from tests.regions._traffic import build_fleet, cut_off_window
from tests.regions.conftest import Region

pytestmark = pytest.mark.cluster

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
GLOBAL = Rate.parse("600/minute")
MEMBER = f"{GLOBAL.limit}:{GLOBAL.period_us}:tenant"
START = 1_700_000_040.0  # a window's start
OPTIONS = {"sync_interval": 1.0, "replication_lag": 5.0}


@pytest.fixture
def links(cluster_regions: dict[str, Region]) -> Iterator[dict[str, ClusterLink]]:
    """us's own links to eu's and ap's Clusters, a proxy per node."""
    made = {}
    for name in ("eu", "ap"):
        cluster = cluster_regions[name].server
        assert isinstance(cluster, RedisCluster)
        made[name] = ClusterLink(cluster)
    try:
        yield made
    finally:
        for link in made.values():
            link.close()


def _us(cluster_regions: dict[str, Region], links: dict[str, ClusterLink], clock: Any) -> Any:
    local = RegionStore(cluster_regions["us"].local(), clock=clock, timeout=0.5)
    peers = {name: RegionStore(link.client(0.2)) for name, link in links.items()}
    return ReconciledBudget("us", local, peers, RATES, **OPTIONS)


@pytest.mark.parametrize("fault", [Fault.BLACKHOLE, Fault.RESET])
def test_a_cluster_peer_cut_off_leaves_the_cap_until_it_is_back(
    cluster_regions: dict[str, Region], links: dict[str, ClusterLink], fault: Fault
) -> None:
    """ap's Cluster unreachable through every node (no answer, or every connection reset):
    us's round names ap, merges eu's counts and leaves its cap unset; with the link back,
    the next round completes and sets it."""
    clock = ManualClock(START)
    us = _us(cluster_regions, links, clock)
    eu = build_fleet(cluster_regions, RATES, clock=clock, **OPTIONS).budgets["eu"]
    for _ in range(5):
        assert eu.hit("tenant", GLOBAL).allowed
        clock.advance(0.1)
    assert eu.sync().complete
    links["ap"].set_fault(fault)
    report = us.sync()
    assert (report.complete, report.failed, report.keys) == (False, ("ap",), 1)
    found = us.local.read_round("us", [MEMBER])
    assert found.entries == [[(found.budgets[0][0], "eu", 5)]]
    assert found.budgets[0][1] == -1, "no cap set by an incomplete round"
    assert found.last_round is None
    links["ap"].set_fault(Fault.NONE)
    assert us.sync().complete
    found = us.local.read_round("us", [MEMBER])
    assert found.budgets[0][1] == 0 + (GLOBAL.limit - 5) * 30 // 60
    assert found.last_round == clock.now_us()


async def test_the_asyncio_budget_names_a_cut_off_cluster_peer(
    cluster_regions: dict[str, Region], links: dict[str, ClusterLink]
) -> None:
    """The asyncio twin over redis.asyncio Cluster clients through the same links: ap reset,
    the round names it; back, the round completes."""
    clock = ManualClock(START)
    local = AsyncRegionStore(cluster_regions["us"].alocal(), clock=clock, timeout=0.5)
    peers = {name: AsyncRegionStore(link.aclient(0.2)) for name, link in links.items()}
    us = AsyncReconciledBudget("us", local, peers, RATES, **OPTIONS)
    try:
        assert (await us.hit("tenant", GLOBAL)).allowed
        links["ap"].set_fault(Fault.RESET)
        report = await us.sync()
        assert (report.complete, report.failed) == (False, ("ap",))
        links["ap"].set_fault(Fault.NONE)
        assert (await us.sync()).complete
    finally:
        for store in (local, *peers.values()):
            await store.aclose()
            await store.client.aclose()


def test_a_cluster_region_cut_off_from_its_peers_is_held_at_its_budget(
    cluster_regions: dict[str, Region], links: dict[str, ClusterLink]
) -> None:
    """us reads eu's and ap's Clusters through its own links, reset 10 s into the window,
    while eu and ap still read us: us's rounds fail, it spends the cap of its last complete
    round late, eu and ap hold that cap for it, and the window stays within the limit plus
    the bound."""
    clock = ManualClock(START)
    fleet = build_fleet(cluster_regions, RATES, sync_interval=1.0, replication_lag=0.1, clock=clock)
    local = RegionStore(cluster_regions["us"].local(), clock=clock, timeout=0.5)
    peers = {name: RegionStore(link.client(0.2)) for name, link in links.items()}
    us = ReconciledBudget("us", local, peers, RATES, sync_interval=1.0, replication_lag=0.1)
    budgets = {**fleet.budgets, "us": us}
    run = cut_off_window(budgets, GLOBAL, clock, lambda: _reset(links))
    admitted = run.admitted
    total = sum(admitted.values())
    print(
        f"\n[regions] cluster us cut off: admitted {admitted}, total {total}, bound {fleet.bound}"
    )
    assert total <= GLOBAL.limit + fleet.bound
    assert all(report.complete for report in run.us_rounds[:10])
    assert {(r.complete, r.failed) for r in run.us_rounds[10:]} == {(False, ("eu", "ap"))}
    assert {report.silent for report in run.eu_rounds[12:]} == {("us",)}
    assert admitted["us"] == local.read_round("us", [MEMBER]).budgets[0][1] > 100


def _reset(links: Mapping[str, Any]) -> None:
    """Every connection through ``links`` reset, and every new one."""
    for link in links.values():
        link.set_fault(Fault.RESET)
