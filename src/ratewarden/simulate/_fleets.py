"""The regions a simulation runs, one strategy for all: what a request and a round do.

``ReconciledFleet`` puts a ``ReconciledBudget`` in every region (its rounds fetch the
peers' counts, then apply them a round time later); ``QuotaFleet`` a ``RegionalQuota``
(its allowance of the global rate, enforced on the region's own store), static or
rebalanced from traffic every round (``rebalance_round`` over a ``DemandExchange``). The
run (``regions.run_regions``) asks each the same things in the same order, so one event
loop simulates either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ratewarden.decision import Decision
from ratewarden.limiter import Limiter
from ratewarden.rate import Rate
from ratewarden.regions import DemandExchange, ReconciledBudget, RegionalQuota

__all__ = ["STRATEGIES", "QuotaFleet", "ReconciledFleet"]

#: ``--strategy``'s choices: what each region runs.
STRATEGIES = ("reconciled", "quota", "static")

#: The one key every region decides its traffic on.
KEY = "simulated"

#: A region's peers as it reaches them: region -> store (through a cut link, or not).
Peers = Callable[[str], dict[str, Any]]


class ReconciledFleet:
    """A ``ReconciledBudget`` in every region, each on its own region store."""

    strategy = "reconciled"
    #: A round's counts are applied a round time after they are fetched.
    applies = True

    def __init__(
        self,
        stores: Mapping[str, Any],
        peers: Peers,
        region_rates: Mapping[str, Rate],
        *,
        sync_interval: float,
        replication_lag: float,
    ) -> None:
        self.budgets = {
            name: ReconciledBudget(
                name,
                stores[name],
                peers(name),
                region_rates,
                sync_interval=sync_interval,
                replication_lag=replication_lag,
            )
            for name in stores
        }
        #: The stated overshoot a window (``ReconciledBudget.bound``).
        self.bound = next(iter(self.budgets.values())).bound

    def hit(self, name: str, rate: Rate, cost: int) -> Decision:
        return self.budgets[name].hit(KEY, rate, cost)

    def fetch(self, name: str, number: int) -> Any:
        """Round ``number`` of region ``name`` starts: the peers' counts as read now."""
        return self.budgets[name].fetch()

    def apply(self, name: str, view: Any) -> tuple[bool, int]:
        """Apply a fetched round: (whether it failed, stale rounds in it)."""
        report = self.budgets[name].apply(view)
        return bool(report.failed), report.stale


class QuotaFleet:
    """A ``RegionalQuota`` in every region: its allowance of the global rate (``shares``
    weighed by the regions' rates per second) on the region's own store (``local_store()``,
    made by the run: the stores are the composition root's), and, with
    ``traffic``, a rebalance round every interval over a ``DemandExchange``. Each region
    counts its allowance in fixed windows, as a reconciled budget counts the global limit
    (its G-counter is per aligned window), so the two compare window for window."""

    applies = False

    def __init__(
        self,
        stores: Mapping[str, Any],
        peers: Peers,
        region_rates: Mapping[str, Rate],
        *,
        local_store: Callable[[], Any],
        traffic: bool,
    ) -> None:
        self.strategy = "quota" if traffic else "static"
        shares = {n: rate.limit * 1_000_000 / rate.period_us for n, rate in region_rates.items()}
        self.quotas = {
            name: RegionalQuota(name, Limiter(local_store(), "fixed_window"), shares)
            for name in stores
        }
        self.exchanges = {
            name: DemandExchange(name, {name: stores[name], **peers(name)}) for name in stores
        }
        self.traffic = traffic
        #: Allowances add up to the limit: a regional quota states no overshoot.
        self.bound = 0

    def hit(self, name: str, rate: Rate, cost: int) -> Decision:
        return self.quotas[name].hit(KEY, rate, cost)

    def fetch(self, name: str, number: int) -> bool:
        """Round ``number`` of region ``name`` (the start of interval ``number``): whether it
        failed to move the shares once it could have (from its third round on, every region's
        demand of the interval before last is there to read)."""
        if not self.traffic:
            return False
        weights = self.quotas[name].rebalance_round(self.exchanges[name], number)
        return weights is None and number > 2

    def apply(self, name: str, view: Any) -> tuple[bool, int]:
        raise AssertionError("a quota's round is whole when it starts")
