"""``RegionalQuota.rebalance_round`` refuses an exchange that does not match the quota.

An exchange that left a region out weighed that region's demand as 0 in this region and
not in the others: the regions reached different shares, and their allowances no longer
added up to the limit. Three regions in this process (``MemoryRegionStore``), no Redis.
"""

from __future__ import annotations

import pytest

from ratewarden import Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.regions import DemandExchange, RegionalQuota
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.memory_regions import MemoryRegionStore
from ratewarden.testing import ManualClock

SHARES = {"us": 60, "eu": 30, "ap": 10}


def _fleet() -> tuple[dict[str, RegionalQuota], dict[str, MemoryRegionStore]]:
    clock = ManualClock(1_700_000_000)
    stores = {name: MemoryRegionStore(clock=clock) for name in SHARES}
    quotas = {
        name: RegionalQuota(name, Limiter(MemoryStore(clock=clock)), SHARES) for name in SHARES
    }
    return quotas, stores


def test_an_exchange_without_a_region_of_the_shares_is_refused_and_changes_nothing() -> None:
    """us and eu exchange, ap is left out: refused, naming both region lists, with the
    shares kept and no demand published."""
    quotas, stores = _fleet()
    partial = DemandExchange("us", {"us": stores["us"], "eu": stores["eu"]})
    quotas["us"].hit("tenant", Rate.parse("100/minute"))
    with pytest.raises(ConfigurationError, match=r"over \['eu', 'us'\].*over \['ap', 'eu', 'us'\]"):
        quotas["us"].rebalance_round(partial, 3)
    assert quotas["us"].shares == SHARES
    assert stores["us"].demand("us", 2) is None


def test_an_exchange_of_another_region_is_refused() -> None:
    """eu's exchange handed to us's quota would publish us's demand as eu's."""
    quotas, stores = _fleet()
    with pytest.raises(ConfigurationError, match="region 'eu''s over"):
        quotas["us"].rebalance_round(DemandExchange("eu", stores), 3)


@pytest.mark.parametrize("interval", ["3", 2.5, -1, True, None])
def test_a_bad_interval_is_refused(interval: object) -> None:
    """The interval number is a whole number >= 0, named when it is not."""
    quotas, stores = _fleet()
    with pytest.raises(ConfigurationError, match=f"interval {interval!r} must be a whole number"):
        quotas["us"].rebalance_round(DemandExchange("us", stores), interval)  # type: ignore[arg-type]


def test_a_matching_exchange_rebalances_as_before() -> None:
    """The whole exchange: every region reaches the same weights from the same counts."""
    quotas, stores = _fleet()
    exchanges = {name: DemandExchange(name, stores) for name in SHARES}
    for name, count in (("us", 5), ("eu", 50), ("ap", 5)):
        for _ in range(count):
            quotas[name].hit("tenant", Rate.parse("1000/minute"))
    for interval in (1, 2):
        results = {name: quotas[name].rebalance_round(exchanges[name], interval) for name in SHARES}
    assert results["us"] == results["eu"] == results["ap"] is not None
