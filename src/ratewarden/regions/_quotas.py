"""RegionalQuota: a global limit split into per-region allowances, each enforced locally.

Every region holds an allowance of each global rate (``split_allowances``: the
allowances sum to exactly the limit) and enforces it on its own store with the
ordinary ``Limiter``. Nothing crosses regions on the request path, and nothing
is ever over the global limit within one share epoch. The price is waste: a
region whose traffic is below its share leaves budget that a busier one
cannot use.

Shares are static (``shares={"us": 60, "eu": 30, "ap": 10}``) or follow traffic:
every region counts its demand (the cost asked, allowed or not) and publishes
it; ``rebalance`` recomputes the shares from every region's demand of the last
interval (``traffic_weights``). ``DemandExchange`` carries those counts
through each region's Redis, by the ``RegionStore``s it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ratewarden.checks import check_cost, check_key, check_rates
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Limiter
from ratewarden.rate import Rate
from ratewarden.regions._bound import check_weights, split_allowances, traffic_weights
from ratewarden.regions._gcounter import check_region
from ratewarden.regions._stores import check_stores, deprecated_clients, is_client

if TYPE_CHECKING:
    import redis

    from ratewarden.storage.regions import RegionStore

__all__ = ["DemandExchange", "RegionalQuota"]


class RegionalQuota:
    """This region's allowance of each global rate, enforced by ``limiter`` on the local store."""

    def __init__(self, region: str, limiter: Limiter, shares: Mapping[str, int | float]) -> None:
        self.region = check_region(region)
        check_weights(shares)
        if region not in shares:
            raise ConfigurationError(f"shares name {sorted(shares)} but not this region {region!r}")
        self.limiter = limiter
        self._shares: dict[str, int | float] = dict(shares)
        self._demand = 0
        self._lock = threading.Lock()

    @property
    def shares(self) -> dict[str, int | float]:
        """The weights the allowances are split by, per region."""
        return dict(self._shares)

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region of the split, in the order given."""
        return tuple(self._shares)

    def allowance(self, rate: Rate) -> int:
        """This region's part of ``rate.limit`` under the current shares."""
        return split_allowances(rate.limit, self._shares)[self.region]

    def local_rates(self, rates: Rate | Sequence[Rate]) -> tuple[Rate | None, ...]:
        """Each global rate scaled to this region's allowance; None where it is 0."""
        scaled: list[Rate | None] = []
        for rate in check_rates(rates):
            allowance = self.allowance(rate)
            if allowance == 0:
                scaled.append(None)
                continue
            burst = None
            if rate.burst is not None:
                burst = max(1, split_allowances(rate.burst, self._shares)[self.region])
            scaled.append(Rate(allowance, rate.period, burst))
        return tuple(scaled)

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Admit ``cost`` if this region's allowance of every rate has room (one local decision)."""
        check_key(key)
        check_cost(cost)
        local = self.local_rates(rates)
        with self._lock:
            self._demand += cost
        for rate, scaled in zip(check_rates(rates), local, strict=True):
            if scaled is None:
                # A share of zero: this region may admit nothing of this rate until a rebalance.
                wait = rate.period_seconds
                return Decision(False, 0, 0, 0.0, wait, rate=rate, cost=cost, refill_after=wait)
        present = [r for r in local if r is not None]
        return self.limiter.hit(key, present, cost)

    def take_demand(self) -> int:
        """The cost asked of this region since the last call (allowed or denied), and reset it."""
        with self._lock:
            demand, self._demand = self._demand, 0
        return demand

    def rebalance(self, demand: Mapping[str, int]) -> dict[str, int]:
        """Set the shares from each region's demand of the last interval; returns the weights.

        Every region must call this with the same ``demand`` (what
        ``DemandExchange.collect`` returns once all have published) so that
        their allowances add up to the limit. Usage already counted under the
        old allowance is not carried over: see docs/regions.md.
        """
        weights = traffic_weights(demand, self.regions)
        self._shares = dict(weights)
        return weights

    def rebalance_round(self, exchange: DemandExchange, interval: int) -> dict[str, int] | None:
        """Run at the start of interval number ``interval`` in every region.

        Publishes this region's demand as that of ``interval - 1``, then
        rebalances from every region's demand of ``interval - 2``: each region
        published it a whole interval ago, so all regions read the same counts
        and reach the same shares. If any region's count is missing, the shares
        stay as they are and this returns None; otherwise the new weights.
        """
        exchange.publish(interval - 1, self.take_demand())
        demand, missing = exchange.collect(interval - 2)
        if missing:
            return None
        return self.rebalance(demand)

    def __repr__(self) -> str:
        return f"RegionalQuota(region={self.region!r}, shares={self._shares!r})"


class DemandExchange:
    """Each region's demand per interval, published to its own Redis and read by the others.

    ``stores`` maps every region, this one included, to a ``RegionStore`` on its
    Redis (``ratewarden.storage.regions``, all with one key prefix).
    ``publish(interval, demand)`` writes this region's count for interval number
    ``interval``; ``collect(interval)`` reads every region's count for it
    (missing ones are 0, and which were missing is returned too).

    Deprecated, for one release: redis clients instead of stores (positionally,
    or as ``clients=``), with ``prefix`` for the stores made from them (a
    ``DeprecationWarning``).
    """

    def __init__(
        self,
        region: str,
        stores: Mapping[str, RegionStore] | Mapping[str, redis.Redis] | None = None,
        *,
        prefix: str | None = None,
        clients: Mapping[str, redis.Redis] | None = None,
    ) -> None:
        self.region = check_region(region)
        given = clients if stores is None else stores
        if given is None or (stores is not None and clients is not None):
            raise ConfigurationError("DemandExchange takes one mapping of region -> RegionStore")
        if region not in given:
            raise ConfigurationError(f"stores must include this region {region!r}")
        if clients is not None or any(is_client(value) for value in given.values()):
            self.stores = deprecated_clients("DemandExchange", given, prefix=prefix)
        elif prefix is not None:
            raise ConfigurationError(
                "DemandExchange: the prefix belongs to the stores (RegionStore(client, prefix=...))"
            )
        else:
            self.stores = check_stores("DemandExchange", given)
        self.prefix = self.stores[region].prefix

    def publish(self, interval: int, demand: int) -> None:
        """Record this region's demand of ``interval`` (kept for a few intervals)."""
        self.stores[self.region].publish_demand(self.region, interval, demand)

    def collect(self, interval: int) -> tuple[dict[str, int], tuple[str, ...]]:
        """Every region's demand of ``interval`` and the regions that could not be read."""
        demand: dict[str, int] = {}
        missing: list[str] = []
        for region, store in self.stores.items():
            try:
                count = store.demand(region, interval)
            except StorageError:
                count = None
            if count is None:
                missing.append(region)
            demand[region] = 0 if count is None else count
        return demand, tuple(missing)
