"""A region joining or leaving a reconciled fleet: the regions each budget runs with are
published with its rounds, and a peer that runs with other regions is treated conservatively
(docs/regions.md#adding-or-removing-a-region).

The schedule is the bound tests': regions us 30/s, eu 20/s, ap 10/s (burst 1), 600/minute
global, rounds every second staggered by a third of one, each applied 0.2 s after its
fetch, every region offering 50/s; a ManualClock in 10 ms steps, on three real
redis-servers, peers read through their proxies.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from ratewarden.rate import Rate
from ratewarden.regions import PeerView, ReconciledBudget
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
GLOBAL = Rate.parse("600/minute")
START = 1_700_000_040.0
STEP = 0.01
OFFSETS = {"us": 0.0, "eu": 1 / 3, "ap": 2 / 3}
TWO = ("us", "eu")
ALL = ("us", "eu", "ap")


def _budget(
    regions: Mapping[str, Region], clock: ManualClock, name: str, known: Sequence[str]
) -> ReconciledBudget:
    """``name``'s budget configured with the regions ``known`` (itself among them)."""
    return ReconciledBudget(
        name,
        RegionStore(regions[name].local(), clock=clock, timeout=0.5),
        {peer: RegionStore(regions[peer].remote()) for peer in known if peer != name},
        {region: RATES[region] for region in known},
        sync_interval=1.0,
        replication_lag=0.2,
    )


Event = Callable[[dict[str, ReconciledBudget]], None]


def _run(
    regions: Mapping[str, Region], clock: ManualClock, events: Mapping[float, Event], windows: int
) -> Counter[int]:
    """Drive the budgets ``events`` make (at their times, in seconds) for ``windows``
    minutes: staggered rounds, 50 offers a second in every running region; returns what
    each window admitted."""
    budgets: dict[str, ReconciledBudget] = {}
    at = {round(seconds / STEP): event for seconds, event in events.items()}
    pending: dict[str, PeerView] = {}
    admitted: Counter[int] = Counter()
    for step in range(int(windows * 60 / STEP)):
        if step in at:
            at[step](budgets)
        t = step * STEP
        for name, budget in budgets.items():
            phase = round((t - OFFSETS[name]) / STEP) % round(1 / STEP)
            if phase == 0:
                pending[name] = budget.fetch()
            elif phase == round(0.2 / STEP) and name in pending:
                budget.apply(pending.pop(name))
        if step % 2 == 0:
            for budget in budgets.values():
                admitted[int(t // 60)] += budget.hit("tenant-42", GLOBAL).allowed
        clock.advance(STEP)
    return admitted


def _make(
    regions: Mapping[str, Region], clock: ManualClock, names: Sequence[str], known: Sequence[str]
) -> Event:
    def event(budgets: dict[str, ReconciledBudget]) -> None:
        for name in names:
            budgets[name] = _budget(regions, clock, name, known)

    return event


def test_a_region_started_before_its_peers_know_it_keeps_the_bound(
    regions: dict[str, Region], caplog: pytest.LogCaptureFixture
) -> None:
    """The unsafe order: us and eu run as a two-region fleet, ap starts at 75 s knowing all
    three, and us and eu learn of ap only at 135 s. Before, the window 120-180 s admitted
    719 (44 over limit + bound); now ap holds the peers that do not list it and admits
    nothing past what its first round leaves, so every window stays within 600 + 75."""
    clock = ManualClock(START)
    events = {
        0.0: _make(regions, clock, TWO, TWO),
        75.0: _make(regions, clock, ("ap",), ALL),
        135.0: _make(regions, clock, TWO, ALL),
    }
    with caplog.at_level(logging.WARNING, logger="ratewarden.regions"):
        admitted = _run(regions, clock, events, windows=3)
    bound = _budget(regions, clock, "us", ALL).bound
    print(f"[regions] ap started before its peers knew it: {dict(admitted)} of 600, bound {bound}")
    assert bound == 75
    assert max(admitted.values()) <= GLOBAL.limit + bound, admitted
    said = [r.getMessage() for r in caplog.records if "leave out this region" in r.getMessage()]
    # Once per peer, for as long as the peer does not list ap.
    assert sorted(message.split(" ")[3] for message in said) == ["eu", "us"], said
    assert all(message.startswith("region ap: peer ") for message in said)


def test_adding_the_region_to_its_peers_first_keeps_the_bound(regions: dict[str, Region]) -> None:
    """The safe order: us and eu learn of ap at 75 s (ap's Redis answers, its budget not yet
    running), ap starts at 135 s: every window within 600 + 75."""
    clock = ManualClock(START)
    events = {
        0.0: _make(regions, clock, TWO, TWO),
        75.0: _make(regions, clock, TWO, ALL),
        135.0: _make(regions, clock, ("ap",), ALL),
    }
    admitted = _run(regions, clock, events, windows=3)
    print(f"[regions] ap's peers told first: {dict(admitted)} of 600, bound 75")
    assert max(admitted.values()) <= GLOBAL.limit + 75, admitted


def test_a_round_publishes_the_regions_and_names_a_peer_that_differs(
    regions: dict[str, Region],
) -> None:
    """Each round publishes the regions its budget runs with; a peer that reads them and
    runs with others names it in ``SyncReport.differing``, holds it, and, when that peer
    leaves it out, takes 0 as its own cap before a round (its default cap)."""
    clock = ManualClock(START)
    us = _budget(regions, clock, "us", TWO)
    ap = _budget(regions, clock, "ap", ALL)
    assert ap.default_cap(GLOBAL) == 100
    us.sync()
    store: Any = ap.peers["us"]
    assert store.read_round("us", []).regions == ("eu", "us")
    report = ap.sync()
    assert report.differing == ("us",)  # eu has published nothing yet: nothing to compare
    assert ap.default_cap(GLOBAL) == 0
    # us comes to know ap: once it publishes so, ap lets it go.
    us = _budget(regions, clock, "us", ALL)
    us.sync()
    eu = _budget(regions, clock, "eu", ALL)
    eu.sync()
    assert ap.sync().differing == ()
    assert ap.default_cap(GLOBAL) == 100
