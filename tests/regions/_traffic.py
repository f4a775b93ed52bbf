"""Build three ReconciledBudgets over the region fixtures and drive them on a manual clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ratewarden.clock import Clock
from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.regions import ReconciledBudget
from ratewarden.storage.regions import RegionStore
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
) -> Fleet:
    """One ReconciledBudget per region: local store direct, peers' through their proxies."""
    metrics = OvershootRecorder()
    budgets = {
        name: ReconciledBudget(
            name,
            RegionStore(region.local(), clock=clock, timeout=0.5),
            {
                peer: RegionStore(other.remote(link_timeout))
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
