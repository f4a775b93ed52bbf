"""MemoryRegionStore / AsyncMemoryRegionStore: one region's store held in this process.

The multi-region budgets with no Redis at all: for tests, simulations, demos and
single-host setups. Make one per region and hand them to ``ReconciledBudget`` (this
region's and every peer's) or ``DemandExchange``, as ``RegionStore``s; each object is
"that region's Redis", and the peers of a region are the other regions' objects in
the same process::

    clock = ManualClock()
    stores = {region: MemoryRegionStore(clock=clock) for region in ("us", "eu", "ap")}
    us = ReconciledBudget("us", stores["us"], {"eu": stores["eu"], "ap": stores["ap"]}, ...)

It answers every call as a ``RegionStore`` on Redis does (``tests/regions`` hold the two
to identical replies): the same keys and Ops (``RegionPlan``, ``_region_plan.py``), the
budget's script run by its pure twin (``_region_budget.run``) under the lock, and the
exchange's active sets, demand counts and taken weights kept as Redis keeps them. All of a region's
state is one ``MemoryStore`` (``table``): the rate caps (``hit``, under
``<prefix>:region-rate``), the window hashes, the active sets and the demand counts.
Windows and expiry follow ``clock`` (the system clock by default): a window hash
expires one period past its window's end, an active set once its last member's time
has passed, demand counts an hour after their last write. Redis counts its TTLs in its
own time, and with an injected clock keeps a hash and an active set a day at least;
what has expired counts for nothing in a merge or a read either way (docs/regions.md).

``AsyncMemoryRegionStore`` is its asyncio twin for ``AsyncReconciledBudget`` and
``AsyncDemandExchange``: ``MemoryRegionStore``'s methods, awaited (``aclose`` for
``close``). Nothing here imports redis: no ``[redis]`` extra is needed.

A budget or exchange takes stores of one kind: memory stores cannot read a Redis
store's counts, nor the reverse, so a mix is refused (``ratewarden.regions``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import StorageError
from ratewarden.rate import Rate
from ratewarden.storage import memory
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix
from ratewarden.storage._memory_table import DEFAULT_MAX_KEYS
from ratewarden.storage._ops import Op
from ratewarden.storage._region_budget import Entry, entries, held
from ratewarden.storage._region_plan import (
    DEMAND_INTERVALS,
    DEMAND_TTL_S,
    ROUND_TTL_S,
    PeerRound,
    RegionPlan,
    decode_regions,
    encode_regions,
    taken_field,
)
from ratewarden.storage.memory import MemoryStore

__all__ = ["AsyncMemoryRegionStore", "MemoryRegionStore"]

T = TypeVar("T")
P = ParamSpec("P")
#: ``(index into keys, state, absolute expiry in us)``, as ``MemoryStore._transact`` takes.
Write = tuple[int, Any, int]


class MemoryRegionBase(RegionPlan):
    """A region's state in this process, but for how its calls are made: see the module."""

    kept = "in this process"

    @keywords_checked
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self.prefix = check_prefix(prefix)
        #: The region's whole state (rate caps, window hashes, active sets, demand counts).
        self.table = MemoryStore(clock=clock, max_keys=max_keys, prefix=f"{prefix}:region-rate")
        self.clock: Clock = self.table.clock
        self._injected = clock is not None

    def __repr__(self) -> str:
        clock = "" if not self._injected else f", clock={self.clock!r}"
        return f"{type(self).__name__}(prefix={self.prefix!r}{clock})"


class MemoryRegionStore(MemoryRegionBase):
    """A region's store in this process for ``ReconciledBudget`` and ``DemandExchange``: see
    the module. ``clock`` sets the windows (the system clock by default); ``prefix`` must be
    every region's; ``max_keys`` bounds the table, as ``MemoryStore``'s does.

    Its methods use only the state ``MemoryRegionBase`` holds: ``AsyncMemoryRegionStore``
    awaits them, each on its own state."""

    # -- a Store, for the limiter of the rate caps ----------------------------------------

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """A rate cap's decision: ``MemoryStore.hit`` on the region's table."""
        return self.table.hit(algorithm, key, rates, cost)

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget a rate cap's state (``MemoryStore.reset``)."""
        self.table.reset(algorithm, key, rates)

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """``MemoryStore.acquire_slot`` on the region's table (the Store protocol's)."""
        return self.table.acquire_slot(key, limit, lease_id, slots, ttl_us)

    def release_slot(self, key: str, lease_id: str) -> bool:
        """``MemoryStore.release_slot`` on the region's table."""
        return self.table.release_slot(key, lease_id)

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """``MemoryStore.renew_slot`` on the region's table."""
        return self.table.renew_slot(key, lease_id, ttl_us)

    def ping(self) -> bool:
        """Always True: the state is in this process."""
        return True

    def close(self) -> None:
        """Nothing to release; present so every region store closes the same way."""

    # -- the budget's script, by its pure twin ---------------------------------------------

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` atomically: its pure twin under the table's lock (``MemoryStore.apply``)."""
        return self.table.apply(op)

    def apply_all(self, ops: Sequence[Op]) -> list[list[int] | Exception]:
        """Run every op as ``apply`` runs it, in order, each atomic, not all together: each
        op's reply, or the ``StorageError`` ``apply`` raises for it (its script's error),
        which answers its op only (as ``RegionStore.apply_all``)."""
        found: list[list[int] | Exception] = []
        for op in ops:
            try:
                found.append(self.table.apply(op))
            except StorageError as error:
                found.append(error)
        return found

    # -- the exchange ------------------------------------------------------------------------

    def publish_active(
        self,
        region: str,
        members: Mapping[str, int],
        now_us: int,
        regions: Sequence[str] | None = None,
    ) -> None:
        """Add ``members`` (member -> until, us) to ``region``'s active set, and drop the
        members whose time has passed at ``now_us``; with ``regions``, record them as the
        regions ``region`` runs with (``read_round`` reads them)."""
        added = dict(members)
        if regions is not None:
            config = encode_regions(regions)

            def record(states: list[Any], now: int) -> tuple[None, list[Write]]:
                return None, [(0, config, now + ROUND_TTL_S * 1_000_000)]

            self.table._transact((self._config_key(region),), record)

        def step(states: list[Any], now: int) -> tuple[None, list[Write]]:
            # ZREMRANGEBYSCORE -inf now_us, then ZADD: members given anew take their new time.
            kept = {member: until for member, until in (states[0] or {}).items() if until > now_us}
            kept.update(added)
            # The set lives while a member may be read (``active`` reads one whose time is
            # now), an emptied one not at all. Redis expires it by the TTL the store sends,
            # which an injected clock makes a day; either way the times say what is live.
            last = max(kept.values(), default=now_us - 1)
            return None, [(0, kept, now + last - now_us + 1)]

        self.table._transact((self._active_key(region),), step)

    def active(self, region: str, now_us: int, limit: int) -> list[str]:
        """The members of ``region``'s active set still live at ``now_us``, at most ``limit``,
        in Redis's order (by time, then by name)."""

        def step(states: list[Any], now: int) -> tuple[list[str], list[Write]]:
            found: dict[str, int] = states[0] or {}
            live = sorted((until, member) for member, until in found.items() if until >= now_us)
            return [member for _, member in live[:limit]], []

        return self.table._transact((self._active_key(region),), step)

    def read_counts(self, members: Sequence[str]) -> list[list[Entry]]:
        """Each member's window hash as (window, region, count) entries."""

        def step(states: list[Any], now: int) -> tuple[list[list[Entry]], list[Write]]:
            return [entries(fields or {}) for fields in states], []

        return self.table._transact([self.budget_key(member) for member in members], step)

    def finish_round(self, region: str, at_us: int) -> None:
        """Record that ``region`` completed a round at ``at_us`` (on its clock)."""

        def step(states: list[Any], now: int) -> tuple[None, list[Write]]:
            return None, [(0, at_us, now + ROUND_TTL_S * 1_000_000)]

        self.table._transact((self._round_key(region),), step)

    def read_round(self, region: str, members: Sequence[str]) -> PeerRound:
        """``region``'s last complete round, the regions it runs with, and each member's
        entries and (window, cap): what a peer's round reads of this store."""

        def step(states: list[Any], now: int) -> tuple[PeerRound, list[Write]]:
            hashes = [fields or {} for fields in states[2:]]
            regions = decode_regions(states[1])
            counts = [entries(f) for f in hashes]
            return PeerRound(states[0], counts, [held(f) for f in hashes], regions), []

        keys = [
            self._round_key(region),
            self._config_key(region),
            *(self.budget_key(member) for member in members),
        ]
        return self.table._transact(keys, step)

    def publish_demand(self, region: str, interval: int, demand: int) -> None:
        """Add to ``region``'s demand of interval number ``interval`` (kept a few intervals):
        each process of the region adds what it counted."""

        def step(states: list[Any], now: int) -> tuple[None, list[Write]]:
            counts = dict(states[0] or {})
            counts[interval] = counts.get(interval, 0) + demand  # every process adds its own
            counts.pop(interval - DEMAND_INTERVALS, None)
            return None, [(0, counts, now + DEMAND_TTL_S * 1_000_000)]

        self.table._transact((self._demand_key(region),), step)

    def demand(self, region: str, interval: int) -> int | None:
        """``region``'s demand of interval number ``interval``; None if it published none."""

        def step(states: list[Any], now: int) -> tuple[int | None, list[Write]]:
            return (states[0] or {}).get(interval), []

        return self.table._transact((self._demand_key(region),), step)

    def publish_taken(self, region: str, interval: int, taken: str) -> None:
        """Record the weights ``region`` took for interval number ``interval`` (as text)."""

        def step(states: list[Any], now: int) -> tuple[None, list[Write]]:
            counts = dict(states[0] or {})
            counts[taken_field(interval)] = taken
            counts.pop(taken_field(interval - DEMAND_INTERVALS), None)
            return None, [(0, counts, now + DEMAND_TTL_S * 1_000_000)]

        self.table._transact((self._demand_key(region),), step)

    def demand_and_taken(
        self, region: str, interval: int, taken_interval: int
    ) -> tuple[int | None, str | None]:
        """``region``'s demand of ``interval`` and the weights it took for ``taken_interval``;
        None for either it did not publish."""

        def step(states: list[Any], now: int) -> tuple[tuple[Any, Any], list[Write]]:
            found = states[0] or {}
            return (found.get(interval), found.get(taken_field(taken_interval))), []

        return self.table._transact((self._demand_key(region),), step)


def _awaited(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """``MemoryRegionStore``'s ``method`` as a coroutine method of ``AsyncMemoryRegionStore``
    (``memory._awaited``, named for this class): it runs at once, on the async store's state."""
    call = memory._awaited(method)
    call.__qualname__ = f"AsyncMemoryRegionStore.{method.__name__}"
    return call


class AsyncMemoryRegionStore(MemoryRegionBase):
    """The asyncio twin of ``MemoryRegionStore`` for ``AsyncReconciledBudget`` and
    ``AsyncDemandExchange``: the same options, keys and calls, awaited (``aclose`` for
    ``close``), over a state of its own. Nothing in it waits."""

    hit = _awaited(MemoryRegionStore.hit)
    reset = _awaited(MemoryRegionStore.reset)
    acquire_slot = _awaited(MemoryRegionStore.acquire_slot)
    release_slot = _awaited(MemoryRegionStore.release_slot)
    renew_slot = _awaited(MemoryRegionStore.renew_slot)
    ping = _awaited(MemoryRegionStore.ping)
    apply = _awaited(MemoryRegionStore.apply)
    apply_all = _awaited(MemoryRegionStore.apply_all)
    publish_active = _awaited(MemoryRegionStore.publish_active)
    active = _awaited(MemoryRegionStore.active)
    read_counts = _awaited(MemoryRegionStore.read_counts)
    finish_round = _awaited(MemoryRegionStore.finish_round)
    read_round = _awaited(MemoryRegionStore.read_round)
    publish_demand = _awaited(MemoryRegionStore.publish_demand)
    demand = _awaited(MemoryRegionStore.demand)
    publish_taken = _awaited(MemoryRegionStore.publish_taken)
    demand_and_taken = _awaited(MemoryRegionStore.demand_and_taken)

    async def aclose(self) -> None:
        """Nothing to release; present so every async region store closes the same way."""
