"""RegionalQuota: per-region allowances on three real redis-servers; never over the limit.
The exchange's tests run on three real Redis Clusters, one per region, and on three regions in
this process (MemoryRegionStores), too (``any_regions_or_memory``)."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import Limiter
from ratewarden.rate import Rate
from ratewarden.regions import DemandExchange, RegionalQuota, split_allowances
from ratewarden.storage.redis import RedisStore
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT
from tests.regions._traffic import exchange_store, quota_store
from tests.regions.conftest import Region, set_latency

SHARES = {"us": 60, "eu": 30, "ap": 10}
GLOBAL = Rate.parse("100/minute")


def _quotas(regions: dict[str, Region], clock: ManualClock) -> dict[str, RegionalQuota]:
    return {
        name: RegionalQuota(name, Limiter(quota_store(r, clock)), SHARES)
        for name, r in regions.items()
    }


def test_static_shares_admit_each_allowance_and_never_the_limit_more(
    regions: dict[str, Region],
) -> None:
    """60/30/10 of 100/minute: each region admits exactly its allowance; 100 in all."""
    clock = ManualClock(1_700_000_000)
    quotas = _quotas(regions, clock)
    admitted = {
        name: sum(q.hit("tenant", GLOBAL).allowed for _ in range(150)) for name, q in quotas.items()
    }
    print(f"\n[regions] static quotas of {GLOBAL.limit}: admitted {admitted}")
    assert admitted == {"us": 60, "eu": 30, "ap": 10}
    assert sum(admitted.values()) <= GLOBAL.limit


def test_static_shares_waste_budget_when_traffic_shifts(regions: dict[str, Region]) -> None:
    """All traffic in ap: it gets its 10, and the other 90 of the limit go unused."""
    clock = ManualClock(1_700_000_000)
    ap = _quotas(regions, clock)["ap"]
    assert sum(ap.hit("tenant", GLOBAL).allowed for _ in range(100)) == 10


def test_traffic_shares_are_exchanged_across_the_links_and_agree(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """Each region publishes its demand; every region reads all three through the 20 ms
    links, rebalances to the same weights, and the new allowances sum to the limit.
    """
    regions = any_regions_or_memory
    set_latency(regions, 0.010)
    clock = ManualClock(1_700_000_000)
    quotas = _quotas(regions, clock)
    for name, offers in {"us": 5, "eu": 10, "ap": 85}.items():
        for _ in range(offers):
            quotas[name].hit("tenant", GLOBAL)
    for name, quota in quotas.items():
        local = exchange_store(regions[name], clock)
        DemandExchange(name, {name: local}).publish(7, quota.take_demand())
    seen = []
    for name, quota in quotas.items():
        stores = {
            peer: exchange_store(r, clock, remote=peer != name) for peer, r in regions.items()
        }
        demand, missing = DemandExchange(name, stores).collect(7)
        assert missing == ()
        seen.append(quota.rebalance(demand))
    assert seen[0] == seen[1] == seen[2] == {"us": 8, "eu": 13, "ap": 88}
    allowances = {name: q.allowance(GLOBAL) for name, q in quotas.items()}
    print(f"\n[regions] traffic shares {seen[0]} -> allowances {allowances}")
    assert allowances == split_allowances(GLOBAL.limit, seen[0])
    assert sum(allowances.values()) == GLOBAL.limit


def test_a_region_missing_from_the_exchange_is_reported(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """A region that published nothing for the interval counts as 0 and is named as missing."""
    regions = any_regions_or_memory
    clock = ManualClock(1_700_000_000)
    exchange = DemandExchange("us", {n: exchange_store(r, clock) for n, r in regions.items()})
    exchange.publish(3, 12)
    demand, missing = exchange.collect(3)
    assert demand == {"us": 12, "eu": 0, "ap": 0}
    assert missing == ("eu", "ap")


def test_a_zero_allowance_denies_without_touching_the_store(regions: dict[str, Region]) -> None:
    """1/minute split 60/30/10 leaves eu and ap nothing: denied, retry after the period."""
    clock = ManualClock(1_700_000_000)
    eu = _quotas(regions, clock)["eu"]
    decision = eu.hit("tenant", Rate.parse("1/minute"))
    assert not decision.allowed and decision.retry_after == 60.0
    assert regions["eu"].local().dbsize() == 0


@pytest.mark.parametrize("shares", [{"eu": 1}, {"us": -1}, {"us": 0, "eu": 0}, {}])
def test_bad_shares_are_refused(regions: dict[str, Region], shares: dict[str, int]) -> None:
    """Shares without this region, negative, all zero or empty raise ConfigurationError."""
    with pytest.raises(ConfigurationError):
        RegionalQuota(
            "us", Limiter(RedisStore(regions["us"].local(), timeout=STORE_TIMEOUT)), shares
        )


def test_rebalance_rounds_agree_one_interval_late_and_keep_shares_on_a_gap(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """Rounds at the start of each interval: shares follow the demand of two intervals back,
    identical in every region; the first round (nothing published yet) keeps the static shares,
    and a region whose share grows waits a round for it.
    """
    regions = any_regions_or_memory
    set_latency(regions, 0.005)
    clock = ManualClock(1_700_000_000)
    quotas = _quotas(regions, clock)
    exchanges = {
        name: DemandExchange(
            name,
            {p: exchange_store(r, clock, remote=p != name) for p, r in regions.items()},
        )
        for name in regions
    }
    results: list[dict[str, dict[str, int] | None]] = []
    for interval, offers in ((1, {"us": 0, "eu": 0, "ap": 0}), (2, {"us": 2, "eu": 4, "ap": 40})):
        for name, count in offers.items():
            for _ in range(count):
                quotas[name].hit("tenant", GLOBAL)
        results.append(
            {n: q.rebalance_round(exchanges[n], interval + 1) for n, q in quotas.items()}
        )
        if interval == 1:
            assert quotas["us"].shares == SHARES
    results.append({n: q.rebalance_round(exchanges[n], 4) for n, q in quotas.items()})
    assert results[0] == {"us": None, "eu": None, "ap": None}
    assert results[1] == {n: {"us": 1, "eu": 1, "ap": 1} for n in regions}
    assert results[2] == {n: {"us": 3, "eu": 5, "ap": 41} for n in regions}
    # Shrink first, grow after: us and eu drop to the new weights at once; ap grows only
    # once every region has taken them (a round later), so 49 of 100 for this interval.
    assert {n: q.allowance(GLOBAL) for n, q in quotas.items()} == {"us": 6, "eu": 10, "ap": 33}
    assert all(q.held == () for q in quotas.values())


def test_the_deprecated_client_form_of_the_exchange_still_works_with_a_warning(
    regions: dict[str, Region],
) -> None:
    """Redis clients (positionally, or as clients=) with prefix= still make a working
    DemandExchange for one release, with a DeprecationWarning naming RegionStore; it reads
    what the store form wrote under the same prefix."""
    with pytest.warns(DeprecationWarning, match="RegionStore"):
        old = DemandExchange("us", {n: r.local() for n, r in regions.items()}, prefix="old")
    with pytest.warns(DeprecationWarning, match="RegionStore"):
        keyword = DemandExchange("eu", clients={n: r.local() for n, r in regions.items()})
    old.publish(5, 7)
    keyword.publish(5, 3)
    new = DemandExchange(
        "ap", {n: RegionStore(r.local(), prefix="old") for n, r in regions.items()}
    )
    assert new.collect(5) == ({"us": 7, "eu": 0, "ap": 0}, ("eu", "ap"))
    assert keyword.collect(5) == ({"us": 0, "eu": 3, "ap": 0}, ("us", "ap"))
    with pytest.raises(ConfigurationError, match="prefix belongs to the stores"):
        DemandExchange("ap", {n: RegionStore(r.local()) for n, r in regions.items()}, prefix="x")
