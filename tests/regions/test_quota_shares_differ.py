"""RegionalQuotas given different shares in different regions (a rolling change of the
configuration) stay within the limit once their rounds read each other's weights, say so
once, and come to agree.

Every round publishes the weights a region took; pairs with no weights in common mean regions
on different shares (``regions/_taken.py``, ``disagree``). Before, nothing checked: with ap on
10/30/60 and us and eu on 60/30/10 of 1000/minute, no round ever moved (no weights common to
every region) and the three admitted 600 + 300 + 600 = 1,500 a minute, silently.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, Rate
from ratewarden.regions import DemandExchange, RegionalQuota
from ratewarden.testing import ManualClock
from tests.regions._traffic import exchange_store, quota_store
from tests.regions.conftest import REGIONS, Region

GLOBAL = Rate.parse("1000/minute")
OLD = {"us": 60, "eu": 30, "ap": 10}
NEW = {"us": 10, "eu": 30, "ap": 60}
LIMITS = (1, 3, 7, 20, 1000, 6000)


def _fleet(
    regions: dict[str, Region], clock: ManualClock, shares: dict[str, dict[str, int]]
) -> tuple[dict[str, RegionalQuota], dict[str, DemandExchange]]:
    quotas = {
        name: RegionalQuota(
            name, Limiter(quota_store(region, clock), algorithm="fixed_window"), shares[name]
        )
        for name, region in regions.items()
    }
    exchanges = {
        reader: DemandExchange(
            reader,
            {peer: exchange_store(r, clock, remote=peer != reader) for peer, r in regions.items()},
        )
        for reader in regions
    }
    return quotas, exchanges


def test_regions_on_different_shares_admit_no_more_than_the_limit(
    any_regions_or_memory: dict[str, Region], caplog: pytest.LogCaptureFixture
) -> None:
    """ap on other shares than us and eu, a round every 10 s, 30 a second offered in each
    region for five minutes: every minute admits at most 1,000 (1,500 before). Each region
    warns once, names the others in ``differing`` while they disagree, then all take the
    same shares and say so."""
    clock = ManualClock(1_700_000_040)
    shares = {"us": OLD, "eu": OLD, "ap": NEW}
    quotas, exchanges = _fleet(any_regions_or_memory, clock, shares)
    per_minute, admitted, differing = [], 0, []
    with caplog.at_level(logging.INFO, logger="ratewarden.regions"):
        for second in range(300):
            if second % 10 == 0:
                for name, quota in quotas.items():
                    quota.rebalance_round(exchanges[name], second // 10)
                differing.append({name: quota.differing for name, quota in quotas.items()})
            for quota in quotas.values():
                admitted += sum(quota.hit("tenant", GLOBAL).allowed for _ in range(30))
            clock.advance(1)
            if second % 60 == 59:
                per_minute.append(admitted)
                admitted = 0
    print(f"\n[regions] quotas on different shares, per minute: {per_minute}")
    assert all(count <= GLOBAL.limit for count in per_minute)
    assert per_minute[-1] >= 990, "once they agree the whole limit is used"
    assert {"us": ("ap",), "eu": ("ap",), "ap": ("eu", "us")} in differing
    assert differing[-1] == dict.fromkeys(REGIONS, ())
    assert quotas["us"].shares == quotas["eu"].shares == quotas["ap"].shares
    events = [getattr(record, "event", None) for record in caplog.records]
    assert events.count("region_quota_shares_differ") == 3
    assert events.count("region_quota_shares_agree") == 3


def _allowances(quotas: dict[str, RegionalQuota], limit: int) -> dict[str, int]:
    rate = Rate(limit, GLOBAL.period)
    return {name: quota.allowance(rate) for name, quota in quotas.items()}


def test_with_no_traffic_the_allowances_add_up_to_no_more_than_the_limit() -> None:
    """The same shares with no traffic and rounds running, in this process: from the round
    that first reads the others' weights (the second), every region's allowance is at most
    its allowance under each shares found (ap 100, not 600), so they add up to 500 of 1,000
    until the regions agree; before, 600 + 300 + 600."""
    clock = ManualClock(1_700_000_040)
    regions = {name: Region(name, None) for name in REGIONS}
    quotas, exchanges = _fleet(regions, clock, {"us": OLD, "eu": OLD, "ap": NEW})
    seen = []
    for interval in range(4):
        for name, quota in quotas.items():
            quota.rebalance_round(exchanges[name], interval)
        seen.append(_allowances(quotas, GLOBAL.limit))
    print(f"\n[regions] allowances after each round: {seen}")
    assert seen[0] == {"us": 600, "eu": 300, "ap": 600}  # nothing read yet
    assert seen[1] == {"us": 100, "eu": 300, "ap": 100}
    assert all(sum(found.values()) <= GLOBAL.limit for found in seen[1:])
    assert sum(seen[-1].values()) == GLOBAL.limit


@settings(max_examples=40, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            name: st.fixed_dictionaries({n: st.integers(0, 9) for n in REGIONS}).filter(
                lambda weights: sum(weights.values()) > 0
            )
            for name in REGIONS
        }
    ),
    st.lists(st.fixed_dictionaries({n: st.integers(0, 300) for n in REGIONS}), max_size=6),
)
def test_any_shares_stay_within_the_limit_from_the_first_round_that_reads_them(
    shares: dict[str, dict[str, int]], demand: list[dict[str, int]]
) -> None:
    """Random shares per region and random demand: after every round from the second (the
    first that reads every region's weights), at every limit checked, the allowances add up
    to no more than it; and two rounds after demand is published the regions agree."""
    clock = ManualClock(1_700_000_040)
    regions = {name: Region(name, None) for name in REGIONS}
    quotas, exchanges = _fleet(regions, clock, shares)
    for interval in range(len(demand) + 4):
        for name, count in (demand[interval] if interval < len(demand) else {}).items():
            if count:
                quotas[name].hit("tenant", GLOBAL, count)
        for name, quota in quotas.items():
            quota.rebalance_round(exchanges[name], interval)
        if interval >= 1:
            for limit in LIMITS:
                assert sum(_allowances(quotas, limit).values()) <= limit, (interval, limit)
    assert all(quota.differing == () for quota in quotas.values())
    assert quotas["us"].shares == quotas["eu"].shares == quotas["ap"].shares
