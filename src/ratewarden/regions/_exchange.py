"""DemandExchange / AsyncDemandExchange: each region's demand per interval, through its Redis.

Each region publishes the demand it counted in an interval to its own Redis,
and reads every region's (``RegionalQuota.rebalance_round``). Both calls are
flows written once in ``Exchange`` (``ratewarden.limiter``): ``DemandExchange``
runs them blocking on ``RegionStore``s, ``AsyncDemandExchange`` awaited on
``AsyncRegionStore``s, reading the regions side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ratewarden.checks import keywords_checked
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Ask, Flow, Gather, adrive, awaiting, blocking, drive
from ratewarden.regions._gcounter import check_region
from ratewarden.regions._stores import check_stores, deprecated_clients, is_client

if TYPE_CHECKING:
    import redis

    from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
    from ratewarden.storage.regions import AsyncRegionStore, RegionStore

__all__ = ["AsyncDemandExchange", "DemandExchange", "Exchange"]

#: The region store of a twin: ``RegionStore`` or ``AsyncRegionStore``.
S = TypeVar("S")
T = TypeVar("T")


class Exchange(Generic[S]):
    """Everything of a demand exchange but the waiting: its twins run these flows."""

    #: Whether the twin awaits its stores (and so takes AsyncRegionStores).
    _awaited: ClassVar[bool]
    region: str
    prefix: str
    stores: dict[str, S]

    def _checked(self, region: str, stores: Mapping[str, Any] | None) -> str:
        """``region``, once ``stores`` is a mapping that names it."""
        check_region(region)
        if stores is None:
            wanted = "AsyncRegionStore" if self._awaited else "RegionStore"
            raise ConfigurationError(
                f"{type(self).__name__} takes one mapping of region -> {wanted}"
            )
        if region not in stores:
            raise ConfigurationError(f"stores must include this region {region!r}")
        return region

    def publish_flow(self, interval: int, demand: int) -> Flow[None]:
        """Add this process's demand of ``interval`` to the region's (kept a few intervals).

        Checked here, in the writer: a bad count published would fail every region's
        rebalance round that reads it."""
        if isinstance(interval, bool) or not isinstance(interval, int):
            raise ConfigurationError(
                f"{type(self).__name__}.publish: interval {interval!r} must be a whole number "
                "(the number of the interval the demand was counted in)"
            )
        if isinstance(demand, bool) or not isinstance(demand, int) or demand < 0:
            raise ConfigurationError(
                f"{type(self).__name__}.publish: demand {demand!r} of region {self.region!r} "
                "must be a whole number >= 0 (the cost asked in the interval)"
            )
        store: Any = self.stores[self.region]
        reply = yield Ask(store.publish_demand, (self.region, interval, demand))
        if isinstance(reply, Exception):
            raise reply

    def publish_taken_flow(self, interval: int, taken: str) -> Flow[None]:
        """Record the weights this region took for ``interval`` (a quota's ``Taken``, encoded)."""
        store: Any = self.stores[self.region]
        reply = yield Ask(store.publish_taken, (self.region, interval, taken))
        if isinstance(reply, Exception):
            raise reply

    def collect_round_flow(
        self, interval: int
    ) -> Flow[tuple[dict[str, int], dict[str, str], tuple[str, ...]]]:
        """What a round at the start of ``interval`` reads of every region, in one call each:
        its demand of ``interval - 2`` and its taken weights of ``interval - 1``; and the
        regions that could not be read or lacked either."""
        regions = tuple(self.stores)
        found = yield Gather(tuple(self._round_flow(region, interval) for region in regions))
        demand: dict[str, int] = {}
        taken: dict[str, str] = {}
        missing: list[str] = []
        for region, (count, weights) in zip(regions, found, strict=True):
            if count is None or weights is None:
                missing.append(region)
                continue
            demand[region], taken[region] = count, weights
        return demand, taken, tuple(missing)

    def _round_flow(self, region: str, interval: int) -> Flow[tuple[int | None, str | None]]:
        store: Any = self.stores[region]
        reply = yield Ask(store.demand_and_taken, (region, interval - 2, interval - 1))
        if isinstance(reply, StorageError):
            return None, None
        if isinstance(reply, Exception):
            raise reply
        found: tuple[int | None, str | None] = reply
        return found

    def collect_flow(self, interval: int) -> Flow[tuple[dict[str, int], tuple[str, ...]]]:
        """Every region's demand of ``interval`` and the regions that could not be read."""
        regions = tuple(self.stores)
        counts = yield Gather(tuple(self._count_flow(region, interval) for region in regions))
        demand: dict[str, int] = {}
        missing: list[str] = []
        for region, count in zip(regions, counts, strict=True):
            if count is None:
                missing.append(region)
            demand[region] = 0 if count is None else count
        return demand, tuple(missing)

    def _count_flow(self, region: str, interval: int) -> Flow[int | None]:
        """One region's count: None when it published none, or its Redis did not answer."""
        store: Any = self.stores[region]
        reply = yield Ask(store.demand, (region, interval))
        if isinstance(reply, StorageError):
            return None
        if isinstance(reply, Exception):
            raise reply
        count: int | None = reply
        return count


class DemandExchange(Exchange["RegionStore | MemoryRegionStore"]):
    """Each region's demand per interval, published to its own Redis and read by the others.

    ``stores`` maps every region, this one included, to a ``RegionStore`` on its
    Redis (``ratewarden.storage.regions``, all with one key prefix).
    ``publish(interval, demand)`` adds this process's count to this region's
    for interval number ``interval`` (every process of a region publishes its
    own, and they add up); ``collect(interval)`` reads every region's count for
    it (missing ones are 0, and which were missing is returned too).

    Deprecated, for one release: redis clients instead of stores (positionally,
    or as ``clients=``), with ``prefix`` for the stores made from them (a
    ``DeprecationWarning``).
    """

    _awaited = False

    @keywords_checked
    def __init__(
        self,
        region: str,
        stores: Mapping[str, RegionStore | MemoryRegionStore]
        | Mapping[str, redis.Redis]
        | None = None,
        *,
        prefix: str | None = None,
        clients: Mapping[str, redis.Redis] | None = None,
    ) -> None:
        given = clients if stores is None else stores
        if stores is not None and clients is not None:
            given = None
        self.region = self._checked(region, given)
        assert given is not None  # checked above
        if clients is not None or any(is_client(value) for value in given.values()):
            self.stores = deprecated_clients("DemandExchange", given, stacklevel=4, prefix=prefix)
        elif prefix is not None:
            raise ConfigurationError(
                "DemandExchange: the prefix belongs to the stores (RegionStore(client, prefix=...))"
            )
        else:
            self.stores = check_stores("DemandExchange", given)
        self.prefix = self.stores[region].prefix

    def run(self, flow: Flow[T]) -> T:
        """Drive one of this exchange's flows, blocking."""
        return drive(self, flow)

    publish = blocking(Exchange.publish_flow)
    collect = blocking(Exchange.collect_flow)


class AsyncDemandExchange(Exchange["AsyncRegionStore | AsyncMemoryRegionStore"]):
    """The asyncio twin of ``DemandExchange``: an ``AsyncRegionStore`` per region, this one
    included, and ``publish`` / ``collect`` awaited (``collect`` reads them side by side)."""

    _awaited = True

    @keywords_checked
    def __init__(
        self, region: str, stores: Mapping[str, AsyncRegionStore | AsyncMemoryRegionStore]
    ) -> None:
        self.region = self._checked(region, stores)
        self.stores = check_stores("AsyncDemandExchange", stores, awaited=True)
        self.prefix = self.stores[region].prefix

    async def run(self, flow: Flow[T]) -> T:
        """Drive one of this exchange's flows, awaiting each call."""
        return await adrive(self, flow)

    publish = awaiting(Exchange.publish_flow)
    collect = awaiting(Exchange.collect_flow)
