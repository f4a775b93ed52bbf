"""Layered limits in one reconciled decision: ``ReconciledBudget.hit(key, [burst, quota])``.

Each global rate of a layered limit is reconciled on its own (its own window hash, counts
and cap), and a hit is admitted only if every layer's budget has room, then charged to
every layer: all or nothing, in one script (the layers of a key share its hash tag, so
one script on a Cluster too). On three redis-servers, three Redis Clusters and three
regions in this process; the random sequences of ``test_async_reconcile`` and
``test_memory_fleets`` mix layered hits with single ones, and ``test_memory_regions``
holds the script's layered hits to its pure twin.
"""

from __future__ import annotations

import math

import pytest

from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.testing import ManualClock
from tests.regions._traffic import build_fleet
from tests.regions.conftest import Region, all_keys

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
START = 1_700_000_040.0  # a whole minute


def _own(budget: object, member: str) -> int:
    """This region's count of ``member`` in its window hash now (0 when it has none)."""
    entries = budget.local.read_counts([member])[0]  # type: ignore[attr-defined]
    window = budget.clock.now_us() // int(member.split(":")[1])  # type: ignore[attr-defined]
    return sum(count for w, region, count in entries if w == window and region == "us")


def test_a_layered_hit_is_admitted_only_if_every_layer_has_room_and_charges_all_or_none(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """us's default caps are half of each global limit (its rate is half the fleet's): 5 of
    10/s and 12 of 24/minute. The burst denies the sixth hit of a second, the quota the
    thirteenth of the minute; a denied hit charges neither layer, and the Decision names
    the layer that denied, with both layers in ``layers``."""
    burst, quota = Rate.parse("10/s"), Rate.parse("24/minute")
    clock = ManualClock(START)
    fleet = build_fleet(
        any_regions_or_memory, RATES, sync_interval=1.0, replication_lag=0.1, clock=clock
    )
    us = fleet.budgets["us"]
    members = [f"{r.limit}:{r.period_us}:tenant" for r in (burst, quota)]

    def hit(cost: int = 1) -> Decision:
        """A layered hit, then 0.05 s: us's rate (30/s, burst 1) admits hits so spaced."""
        decision = us.hit("tenant", [burst, quota], cost)
        clock.advance(0.05)
        return decision

    answers = [hit() for _ in range(6)]
    assert [d.allowed for d in answers] == [True] * 5 + [False]
    denied = answers[-1]
    assert [layer.allowed for layer in denied.layers] == [False, True]
    assert (denied.rate, denied.limit, denied.remaining) == (burst, 10, 0)
    assert denied.retry_after == pytest.approx(0.75)  # the second's end: 6 hits 0.05 s apart
    assert denied.layers[1].remaining == 7  # the quota kept at 5 of 12: the denial charged none
    assert _own(us, members[0]) == 5 and _own(us, members[1]) == 5
    clock.advance(1.0 - 0.3)  # the next second
    assert all(hit().allowed for _ in range(5))
    clock.advance(1.0 - 0.25)  # the next
    assert hit().allowed and hit().allowed
    third = hit()  # the quota's 13th of 12, at 2.1 s into the minute
    assert not third.allowed
    assert [layer.allowed for layer in third.layers] == [True, False]
    assert (third.rate, third.remaining) == (quota, 0)
    assert third.retry_after == pytest.approx(60 - 2.1)  # the minute's end
    assert third.layers[0].remaining == 3  # the burst kept at 2 of 5 this second
    assert _own(us, members[0]) == 2 and _own(us, members[1]) == 12
    # A cost past a layer's limit can never be admitted: it waits forever.
    assert hit(cost=25).retry_after == math.inf
    assert us.hit("tenant", [Rate.parse("100/s"), quota], cost=11).retry_after == math.inf


def test_rounds_reconcile_each_layer_and_the_fleet_stays_within_both(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """Only us has traffic (50 offers a second, capped at 30/s by its rate) under 100 per
    10 s and 400 a minute: rounds give it the others' unused share of both layers, so it
    admits past its static 50 in a 10 s window, each layer's windows stay within its limit
    plus the bound, and the quota's minute ends near its 400. Every admitted hit is counted
    once in each layer, every denied one in none."""
    burst, quota = Rate(100, 10), Rate.parse("400/minute")
    clock = ManualClock(START)
    fleet = build_fleet(
        any_regions_or_memory, RATES, sync_interval=1.0, replication_lag=0.1, clock=clock
    )
    us = fleet.budgets["us"]
    members = [f"{r.limit}:{r.period_us}:tenant" for r in (burst, quota)]
    windows: dict[int, int] = {}
    for step in range(50 * 50):  # 50 s, all in one minute's window
        if step % 50 == 0:
            for budget in fleet.budgets.values():
                budget.sync()
        if us.hit("tenant", [burst, quota]).allowed:
            windows[step // 500] = windows.get(step // 500, 0) + 1
        if step % 500 == 499:  # each 10 s window's burst count, read within it
            assert _own(us, members[0]) == windows.get(step // 500, 0)
        clock.advance(0.02)
    total = sum(windows.values())
    print(f"\n[regions] layered: bound {fleet.bound}, per 10 s {windows}, minute {total}")
    assert max(windows.values()) <= burst.limit + fleet.bound
    assert windows[0] > 50 and windows[1] > 50  # past the static share, before the quota binds
    assert quota.limit * 0.9 <= total <= quota.limit + fleet.bound
    assert _own(us, members[1]) == total


def test_bad_layers_are_refused_before_anything_is_written(regions: dict[str, Region]) -> None:
    """A layer out of range, not a Rate, or a (limit, period) given twice (two rates of one
    window hash): a ConfigurationError, and nothing on Redis."""
    fleet = build_fleet(regions, RATES, sync_interval=1.0, replication_lag=0.1, clock=None)
    us = fleet.budgets["us"]
    quota = Rate.parse("24/minute")
    for rates, match in (
        ([quota, Rate(10**13, 60)], "out of range"),
        ([quota, "10/s"], "global Rate"),
        ([quota, Rate.parse("10/s"), Rate(24, 60, burst=30)], "twice"),
        ([], "global Rate"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            us.hit("tenant", rates)
    for region in regions.values():
        with region.local() as client:
            assert all_keys(client) == []
