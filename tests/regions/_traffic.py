"""Build three ReconciledBudgets (or AsyncReconciledBudgets) over the region fixtures and drive
them on a manual clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ratewarden.clock import Clock
from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.regions import AsyncReconciledBudget, ReconciledBudget
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
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
    under ``prefix``."""
    metrics = OvershootRecorder()
    budgets = {
        name: ReconciledBudget(
            name,
            RegionStore(region.local(), clock=clock, timeout=0.5, prefix=prefix),
            {
                peer: RegionStore(other.remote(link_timeout, retries=retries), prefix=prefix)
                for peer, other in regions.items()
                if peer != name
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
    peers' through their proxies, under ``prefix``."""
    metrics = OvershootRecorder()
    budgets = {
        name: AsyncReconciledBudget(
            name,
            AsyncRegionStore(region.alocal(), clock=clock, timeout=0.5, prefix=prefix),
            {
                peer: AsyncRegionStore(other.aremote(link_timeout, retries=retries), prefix=prefix)
                for peer, other in regions.items()
                if peer != name
            },
            region_rates,
            sync_interval=sync_interval,
            replication_lag=replication_lag,
            metrics=metrics,
        )
        for name, region in regions.items()
    }
    return AsyncFleet(budgets, metrics)
