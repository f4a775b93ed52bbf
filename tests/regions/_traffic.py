"""Build three ReconciledBudgets (or AsyncReconciledBudgets) over the region fixtures and drive
them on a manual clock: on each region's Redis (RegionStores), or, for regions in this process,
on each region's MemoryRegionStore, which its own budget and its peers' share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ratewarden.clock import Clock
from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.regions import AsyncReconciledBudget, ReconciledBudget, SyncReport
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from tests._servers import STORE_TIMEOUT
from tests.regions.conftest import Region


class OvershootRecorder(Metrics):
    """Keeps every ``region_overshoot`` report, per region."""

    __slots__ = ("reports",)

    def __init__(self) -> None:
        self.reports: dict[str, list[int]] = {}

    def region_overshoot(self, *, region: str, requests: int) -> None:
        self.reports.setdefault(region, []).append(requests)


@dataclass
class Fleet:
    budgets: dict[str, ReconciledBudget]
    metrics: OvershootRecorder
    admitted: dict[str, int] = field(default_factory=dict)

    @property
    def bound(self) -> int:
        bounds = {b.bound for b in self.budgets.values()}
        assert len(bounds) == 1
        return bounds.pop()


def build_fleet(
    regions: Mapping[str, Region],
    region_rates: Mapping[str, Rate],
    *,
    sync_interval: float,
    replication_lag: float,
    clock: Clock | None,
    link_timeout: float = 1.0,
    prefix: str = "rw",
    retries: int | None = None,
) -> Fleet:
    """One ReconciledBudget per region: local store direct, peers' through their proxies,
    under ``prefix``; in this process, each region's MemoryRegionStore as its own and as a
    peer's."""
    metrics = OvershootRecorder()

    def local(region: Region) -> Any:
        if region.in_memory:
            return region.memory_store(_clock(clock), prefix=prefix)
        return RegionStore(region.local(), clock=clock, timeout=0.5, prefix=prefix)

    def peer(region: Region) -> Any:
        if region.in_memory:
            return region.memory_store(_clock(clock), prefix=prefix)
        return RegionStore(region.remote(link_timeout, retries=retries), prefix=prefix)

    budgets = {
        name: ReconciledBudget(
            name,
            local(region),
            {
                other_name: peer(other)
                for other_name, other in regions.items()
                if other_name != name
            },
            region_rates,
            sync_interval=sync_interval,
            replication_lag=replication_lag,
            metrics=metrics,
        )
        for name, region in regions.items()
    }
    return Fleet(budgets, metrics, {name: 0 for name in regions})


@dataclass
class AsyncFleet:
    """``Fleet``'s asyncio twin: one AsyncReconciledBudget per region."""

    budgets: dict[str, AsyncReconciledBudget]
    metrics: OvershootRecorder

    async def aclose(self) -> None:
        """Close every store and client the fleet made."""
        for budget in self.budgets.values():
            for store in (budget.local, *budget.peers.values()):
                await store.aclose()
                if isinstance(store, AsyncRegionStore):
                    await store.client.aclose()


def build_async_fleet(
    regions: Mapping[str, Region],
    region_rates: Mapping[str, Rate],
    *,
    sync_interval: float,
    replication_lag: float,
    clock: Clock | None,
    link_timeout: float = 1.0,
    prefix: str = "rw",
    retries: int | None = None,
) -> AsyncFleet:
    """``build_fleet`` for asyncio: AsyncRegionStores on redis.asyncio clients, local direct,
    peers' through their proxies, under ``prefix``; in this process, AsyncMemoryRegionStores."""
    metrics = OvershootRecorder()

    def local(region: Region) -> Any:
        if region.in_memory:
            return region.memory_store(_clock(clock), prefix=prefix, awaited=True)
        return AsyncRegionStore(region.alocal(), clock=clock, timeout=0.5, prefix=prefix)

    def peer(region: Region) -> Any:
        if region.in_memory:
            return region.memory_store(_clock(clock), prefix=prefix, awaited=True)
        return AsyncRegionStore(region.aremote(link_timeout, retries=retries), prefix=prefix)

    budgets = {
        name: AsyncReconciledBudget(
            name,
            local(region),
            {
                other_name: peer(other)
                for other_name, other in regions.items()
                if other_name != name
            },
            region_rates,
            sync_interval=sync_interval,
            replication_lag=replication_lag,
            metrics=metrics,
        )
        for name, region in regions.items()
    }
    return AsyncFleet(budgets, metrics)


def _clock(clock: Clock | None) -> Clock:
    """A region in this process has no Redis TIME: its windows need the test's clock."""
    assert clock is not None, "regions in this process need a clock"
    return clock


def exchange_store(region: Region, clock: Clock, *, remote: bool = False) -> Any:
    """A region's store for a DemandExchange: a RegionStore on its Redis (across its link
    when ``remote``), or the region's MemoryRegionStore when it is in this process."""
    if region.in_memory:
        return region.memory_store(clock)
    return RegionStore(region.remote() if remote else region.local())


def quota_store(region: Region, clock: Clock) -> Any:
    """The store of a region's RegionalQuota: a RedisStore on its Redis, or a MemoryStore."""
    if region.in_memory:
        return MemoryStore(clock=clock)
    return RedisStore(region.local(), clock=clock, timeout=STORE_TIMEOUT)


@dataclass
class CutOff:
    """``cut_off_window``'s run: what each region admitted, and us's and eu's rounds."""

    admitted: dict[str, int]
    us_rounds: list[SyncReport]
    eu_rounds: list[SyncReport]


def cut_off_window(
    budgets: Mapping[str, ReconciledBudget],
    rate: Rate,
    clock: Any,
    cut: Callable[[], None],
    *,
    step_s: float = 0.02,
) -> CutOff:
    """One window of ``rate`` (a minute) from its start: eu and ap spend all along, us only
    in the last 10 s; every region runs a round each second; ``cut`` is called 10 s in (to
    cut us off from its peers). Every region offers a hit each ``step_s`` on one key."""
    admitted = dict.fromkeys(budgets, 0)
    found = CutOff(admitted, [], [])
    for step in range(int(60 / step_s)):
        if step == int(10 / step_s):
            cut()
        if step % int(1 / step_s) == 0:
            found.us_rounds.append(budgets["us"].sync())
            found.eu_rounds.append(budgets["eu"].sync())
            budgets["ap"].sync()
        for name in ("eu", "ap") if step * step_s < 50 else tuple(budgets):
            admitted[name] += budgets[name].hit("tenant", rate).allowed
        clock.advance(step_s)
    return found
