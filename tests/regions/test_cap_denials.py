"""A hit the region's own rate cap denies: its Decision speaks of the global rates the caller
gave (one layer each, in their order), with the cap's wait as ``retry_after``
(docs/regions.md#layered-limits-a-burst-and-a-quota-in-one-decision). On real redis-servers."""

from __future__ import annotations

import pytest

from ratewarden.rate import Rate
from ratewarden.regions import ReconciledBudget
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
START = 1_700_000_040.0


def _us(regions: dict[str, Region], clock: ManualClock) -> ReconciledBudget:
    return ReconciledBudget(
        "us",
        RegionStore(regions["us"].local(), clock=clock, timeout=0.5),
        {peer: RegionStore(regions[peer].remote()) for peer in ("eu", "ap")},
        RATES,
        sync_interval=1.0,
        replication_lag=0.1,
    )


def test_a_cap_denial_has_one_layer_per_rate_given(regions: dict[str, Region]) -> None:
    """Two layered hits at once in us (cap 30/s, burst 1): the second is the cap's denial,
    with the caller's two rates as its layers (their budgets' remaining and reset), each
    denied for the cap's wait, and the binding layer's limit on top, not the cap's 30."""
    clock = ManualClock(START)
    us = _us(regions, clock)
    rates = [Rate(100, 10), Rate.parse("400/minute")]
    assert us.hit("t", rates).allowed
    denied = us.hit("t", rates)
    assert not denied.allowed
    assert [layer.rate for layer in denied.layers] == rates
    assert all(not layer.allowed for layer in denied.layers)
    wait = pytest.approx(1 / 30, abs=1e-3)
    assert [layer.retry_after for layer in denied.layers] == [wait, wait]
    # Each layer's budget as it stands: us's share (half) of each limit, one spent.
    assert [layer.remaining for layer in denied.layers] == [49, 199]
    assert [layer.limit for layer in denied.layers] == [100, 400]
    assert denied.limit == 100
    assert denied.rate == rates[0]
    assert denied.remaining == 49
    assert denied.retry_after == wait
    assert denied.reset_after == pytest.approx(60.0, abs=0.01)


def test_a_cap_denial_of_one_rate_is_that_rates_decision(regions: dict[str, Region]) -> None:
    """One global rate: the denial names it (limit 400, 400/minute), its budget's remaining,
    and the cap's wait; nothing is charged to the budget."""
    clock = ManualClock(START)
    us = _us(regions, clock)
    rate = Rate.parse("400/minute")
    assert us.hit("t", rate).allowed
    denied = us.hit("t", rate)
    assert (denied.allowed, denied.limit, denied.rate, denied.remaining) == (False, 400, rate, 199)
    assert denied.retry_after == pytest.approx(1 / 30, abs=1e-3)
    assert denied.layers == ()
    clock.advance(0.05)
    assert us.hit("t", rate).remaining == 198  # the denial charged nothing


def test_a_cap_denial_on_a_spent_budget_waits_for_the_window(regions: dict[str, Region]) -> None:
    """When the budget has no room either, the denial's wait is its window's end, the
    longer of the two."""
    clock = ManualClock(START)
    us = _us(regions, clock)
    rate = Rate(2, 60)  # us's share: 1
    assert us.hit("t", rate).allowed
    denied = us.hit("t", rate)
    assert (denied.allowed, denied.limit, denied.remaining) == (False, 2, 0)
    assert denied.retry_after == pytest.approx(60.0, abs=0.01)
