"""A peer that answers but completes no round (it cannot read its own peers: an asymmetric
partition) is held at its whole budget by the others, on three real redis-servers, three
Clusters and three regions in this process.

Such a peer keeps its last cap (its rounds are incomplete), while the others still read its
count. Before, they split its unspent part among themselves round after round, and its late
burst landed on top of a limit they had nearly used. The windows follow a ManualClock. A
region "cannot read its peers" either by not running its rounds, which the others see the
same way (its last complete round grows old), or, on servers, over real links: its reads of
its peers go through proxies of its own, which are then made to reset every connection,
while the peers still read it through its own link.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewarden.rate import Rate
from ratewarden.regions import ReconciledBudget
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests._servers import HOST
from tests.faults._proxy import Fault, FaultProxy
from tests.regions._traffic import build_fleet, cut_off_window
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
GLOBAL = Rate.parse("600/minute")
MEMBER = f"{GLOBAL.limit}:{GLOBAL.period_us}:tenant"
START = 1_700_000_040.0  # a window's start
STEP = 0.02


def _fleet(regions: dict[str, Region], clock: ManualClock) -> Any:
    return build_fleet(regions, RATES, sync_interval=1.0, replication_lag=0.1, clock=clock)


def _round(store: Any, region: str) -> Any:
    return store.read_round(region, [MEMBER])


def test_a_silent_region_cannot_burst_on_top_of_what_the_others_spent(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """us runs no round all window and bursts at its rate cap in the last 10 s; eu and ap
    spend all along and sync every second. The window stays within the limit plus the bound
    (without holding us, eu and ap took ~600 and us ~300 more on top)."""
    clock = ManualClock(START)
    fleet = _fleet(any_regions_or_memory, clock)
    admitted = dict.fromkeys(RATES, 0)
    reports = []
    for step in range(int(60 / STEP)):
        if step % int(1 / STEP) == 0:
            reports.append(fleet.budgets["eu"].sync())
            fleet.budgets["ap"].sync()
        for name in ("eu", "ap") if step * STEP < 50 else tuple(RATES):
            admitted[name] += fleet.budgets[name].hit("tenant", GLOBAL).allowed
        clock.advance(STEP)
    total = sum(admitted.values())
    print(f"\n[regions] silent us: admitted {admitted}, total {total}, bound {fleet.bound}")
    assert total <= GLOBAL.limit + fleet.bound
    assert admitted["us"] >= 200, "us still spends its own budget"
    assert [report.silent for report in reports[:3]] == [(), (), ()]  # 2.1 s of grace
    assert {report.silent for report in reports[3:]} == {("us",)}
    assert all(report.complete for report in reports)


def test_a_held_region_counts_at_its_last_cap_then_is_let_go(
    any_regions_or_memory: dict[str, Region], caplog: pytest.LogCaptureFixture
) -> None:
    """us (10 a second) completes rounds for 5 s, then none, while eu spends 15 a second:
    2.1 s after us's last round, eu's cap leaves us all of its last cap (not its default
    share); when us completes a round again, eu splits what is left as before. Each change
    is logged once."""
    caplog.set_level(logging.INFO, logger="ratewarden.regions")
    clock = ManualClock(START)
    fleet = _fleet(any_regions_or_memory, clock)
    us, eu, ap = (fleet.budgets[name] for name in ("us", "eu", "ap"))
    for second in range(10):
        for step in range(15):
            eu.hit("tenant", GLOBAL)
            if step % 3:
                us.hit("tenant", GLOBAL)
            clock.advance(1 / 16)
        if second < 5:
            us.sync()
        # us's last complete round at 4 s: held from 2.1 s after it.
        assert eu.sync().silent == (("us",) if second >= 7 else ())
        ap.sync()
        clock.advance(1 / 16)
    found = _round(eu.local, "eu")
    us_found = _round(us.local, "us")
    us_cap = us_found.budgets[0][1]
    counts = {region: count for _, region, count in found.entries[0]}
    assert 0 < counts["us"] < us_cap < us.default_cap(GLOBAL)
    unspent = us_cap - counts["us"]
    left = GLOBAL.limit - sum(counts.values()) - unspent
    assert found.budgets[0][1] == counts["eu"] + left * 20 // 60  # eu's share: 20 of 60
    assert us.sync().complete
    report = eu.sync()
    assert report.complete and report.silent == ()
    found = _round(eu.local, "eu")
    counts = {region: count for _, region, count in found.entries[0]}
    assert found.budgets[0][1] == counts["eu"] + (GLOBAL.limit - sum(counts.values())) * 20 // 60
    events = [
        getattr(r, "event", None) for r in caplog.records if r.getMessage().startswith("region eu")
    ]
    assert [e for e in events if e and e.startswith("region_peer")] == [
        "region_peer_held",
        "region_peer_back",
    ]


def test_a_complete_round_is_recorded_on_the_regions_own_store(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """A complete round records its time on the region's store; an incomplete (stale) one
    does not, so peers see how long ago the region last completed one."""
    clock = ManualClock(START)
    fleet = _fleet(any_regions_or_memory, clock)
    us = fleet.budgets["us"]
    assert _round(us.local, "us").last_round is None
    assert us.sync().complete
    assert _round(us.local, "us").last_round == clock.now_us()
    recorded = clock.now_us()
    clock.advance(1.0)
    view = us.fetch()
    clock.advance(0.2)  # past the lag: a stale round
    assert not us.apply(view).complete
    assert _round(us.local, "us").last_round == recorded
    assert _round(fleet.budgets["eu"].peers["us"], "us").last_round == recorded


def test_an_asymmetric_partition_over_real_links_holds_the_cut_off_region(
    regions: dict[str, Region],
) -> None:
    """us reads eu and ap through links of its own; 10 s into the window they reset every
    connection, while eu and ap still read us. us's rounds fail (naming both peers) and it
    bursts late on the cap of its last complete round; eu and ap hold that cap for it, and
    the window stays within the limit plus the bound."""
    clock = ManualClock(START)
    fleet = _fleet(regions, clock)
    links = {}  # us's own links to eu and ap (the fixture's are the ones everyone shares)
    for name in ("eu", "ap"):
        shared = regions[name].link
        assert shared is not None
        links[name] = FaultProxy(shared.target_port)
    options = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5, "retry": Retry(NoBackoff(), 0)}
    peers = {
        name: RegionStore(redis.Redis(host=HOST, port=link.port, **options), prefix="rw")
        for name, link in links.items()
    }
    local = RegionStore(regions["us"].local(), clock=clock, timeout=0.5, prefix="rw")
    us = ReconciledBudget("us", local, peers, RATES, sync_interval=1.0, replication_lag=0.1)
    budgets = {**fleet.budgets, "us": us}
    try:
        run = cut_off_window(budgets, GLOBAL, clock, lambda: _reset(links))
    finally:
        for link in links.values():
            link.close()
    admitted = run.admitted
    total = sum(admitted.values())
    print(f"\n[regions] us cut off: admitted {admitted}, total {total}, bound {fleet.bound}")
    assert total <= GLOBAL.limit + fleet.bound
    assert all(report.complete for report in run.us_rounds[:10])
    assert {(report.complete, report.failed) for report in run.us_rounds[10:]} == {
        (False, ("eu", "ap"))
    }
    # us's last complete round at 9 s: eu holds it from its round at 12 s (2.1 s later).
    assert [report.silent for report in run.eu_rounds[:12]] == [()] * 12
    assert {report.silent for report in run.eu_rounds[12:]} == {("us",)}
    last_cap = local.read_round("us", [MEMBER]).budgets[0][1]
    assert admitted["us"] == last_cap > 100, "us spends all of the cap of its last round"


def _reset(links: Mapping[str, Any]) -> None:
    """Every connection through ``links`` reset, and every new one."""
    for link in links.values():
        link.set_fault(Fault.RESET)
