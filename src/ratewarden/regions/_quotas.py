"""RegionalQuota / AsyncRegionalQuota: a global limit split into per-region allowances, each
enforced locally.

Every region holds an allowance of each global rate (``split_allowances``: the
allowances sum to exactly the limit) and enforces it on its own store with the
ordinary ``Limiter`` (``AsyncLimiter`` for the asyncio twin). Nothing crosses
regions on the request path, and nothing is ever over the global limit within
one share epoch. The price is waste: a region whose traffic is below its share
leaves budget that a busier one cannot use.

Shares are static (``shares={"us": 60, "eu": 30, "ap": 10}``) or follow traffic:
every region counts its demand (the cost asked, allowed or not) and publishes
it; ``rebalance`` recomputes the shares from every region's demand of the last
interval (``traffic_weights``). ``DemandExchange`` (``AsyncDemandExchange``)
carries those counts through each region's Redis, by the region stores it is
given. A rebalance round also publishes the weights the region took, and moves
"shrink first, grow after" (``_taken``), so that regions that disagree (one
cannot read a peer) still stay within the limit. A key's next hit after its
allowance moved first carries the share of it used to its new state (``_carry``).

``Quota`` holds everything but the waiting: ``_admit`` decides what a hit asks
of the limiter (a plain call, so the twins' ``hit`` is the limiter's own hit,
blocking or awaited), and a rebalance round is a flow the twin's limiter runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from ratewarden.algorithms import WINDOWS
from ratewarden.checks import check_cost, check_key, check_rates, keywords_checked
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import AsyncLimiter, Flow, Limiter, awaiting, blocking
from ratewarden.rate import Rate
from ratewarden.regions._bound import check_weights, traffic_weights
from ratewarden.regions._carry import (
    NOT_CARRIED,
    CarryBook,
    Decided,
    Old,
    Scaled,
    carry_flow,
    region_key,
)
from ratewarden.regions._exchange import AsyncDemandExchange, DemandExchange, Exchange
from ratewarden.regions._gcounter import check_region
from ratewarden.regions._stores import named
from ratewarden.regions._taken import Taken, Weights, decode, disagree, settle

__all__ = ["AsyncRegionalQuota", "Quota", "RegionalQuota"]

log = logging.getLogger("ratewarden.regions")

#: Global rate sets whose scaled rates are remembered (a config has few).
_CACHED_RATE_SETS = 1024

#: The limiter a twin enforces its allowances with.
L = TypeVar("L", Limiter, AsyncLimiter)
T = TypeVar("T")


class Quota(Generic[L]):
    """This region's allowance of each global rate, enforced by ``limiter`` on the local store;
    everything but the waiting (see the module)."""

    #: The exchange a twin's rebalance rounds take: ``DemandExchange`` or its asyncio twin.
    _exchange: ClassVar[type[Exchange[Any]]]
    #: Whether the twin awaits its limiter (an ``AsyncLimiter``).
    _awaited: ClassVar[bool]

    @keywords_checked
    def __init__(self, region: str, limiter: L, shares: Mapping[str, int | float]) -> None:
        self.region = check_region(region)
        check_weights(shares)
        if region not in shares:
            raise ConfigurationError(f"shares name {sorted(shares)} but not this region {region!r}")
        wanted = AsyncLimiter if self._awaited else Limiter
        if not isinstance(limiter, wanted):
            # One check for both twins: anything but the twin's limiter (a store, None, the
            # other twin's limiter) is refused here, not at the first hit.
            found = "None" if limiter is None else named(type(limiter))
            raise ConfigurationError(
                f"{type(self).__name__} needs {named(wanted)} over this region's store, not {found}"
            )
        self.limiter: L = limiter
        #: What this region enforces (its anchor and current weights): replaced, never changed.
        self._taken = Taken.static(shares)
        #: The weights taken before ``_taken`` (None until a round moved them): a key's
        #: usage is carried from its rates under them (``_carry``).
        self._before: Taken | None = None
        self._book = CarryBook()
        #: The weights and each global rate set scaled under them (replaced with them).
        self._cached: tuple[Taken, dict[tuple[Rate, ...], Scaled]] = (self._taken, {})
        algorithm = getattr(limiter, "algorithm", None)
        #: Whether usage is carried over a rebalance: not for the sliding algorithms, whose
        #: state cannot take it; their count goes on under the new allowance (``_carry``).
        self._carries = algorithm not in NOT_CARRIED
        #: Whether each allowance's state is named apart: a window carried (``_carry``).
        self._apart = self._carries and algorithm in WINDOWS
        self._held: tuple[str, ...] = ()
        self._differing: tuple[str, ...] = ()
        self._demand = 0
        self._lock = threading.Lock()

    @property
    def shares(self) -> dict[str, int | float]:
        """The weights the allowances are split by, per region."""
        return dict(self._taken.current.weights)

    @property
    def held(self) -> tuple[str, ...]:
        """The regions that kept this one from growing at its last round: still on older
        weights (they could not read every region), so every region's allowance stays within
        the weights all of them have taken. Empty when every region took the same."""
        return self._held

    @property
    def differing(self) -> tuple[str, ...]:
        """The regions found at the last round on shares with nothing in common with this
        region's (given other shares): while any is, every region admits no more than its
        allowance under each of the shares found. Empty when the regions agree."""
        return self._differing

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region of the split, in the order given."""
        return tuple(region for region, _ in self._taken.current.weights)

    def allowance(self, rate: Rate) -> int:
        """This region's part of ``rate.limit``: under the current shares, and no more than
        under the weights every region has taken (after a rebalance round)."""
        return self._taken.allowance(rate.limit, self.region)

    def local_rates(self, rates: Rate | Sequence[Rate]) -> tuple[Rate | None, ...]:
        """Each global rate scaled to this region's allowance; None where it is 0."""
        return self._scaled(check_rates(rates), self._taken)

    def _scaled(self, rates: tuple[Rate, ...], taken: Taken) -> Scaled:
        """``rates`` scaled to this region's allowances under ``taken`` (remembered for the
        current weights: splitting a limit exactly costs more than the hit)."""
        owner, cache = self._cached  # one read: a rebalance replaces the pair whole
        if taken is owner:
            found = cache.get(rates)
            if found is None:
                found = self._split(rates, taken)
                if len(cache) >= _CACHED_RATE_SETS:
                    cache.clear()
                cache[rates] = found
            return found
        return self._split(rates, taken)

    def _split(self, rates: tuple[Rate, ...], taken: Taken) -> Scaled:
        scaled: list[Rate | None] = []
        for rate in rates:
            allowance = taken.allowance(rate.limit, self.region)
            if allowance == 0:
                scaled.append(None)
                continue
            burst = None
            if rate.burst is not None:
                burst = max(1, taken.allowance(rate.burst, self.region))
            scaled.append(Rate(allowance, rate.period, burst))
        return tuple(scaled)

    def _admit(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision | tuple[str, list[Rate], Flow[None] | None]:
        """What a hit of ``cost`` asks of the limiter: the key and the local rates to decide
        on, and the carry of the key's usage to run first (``_carry``; usually None), or the
        Decision itself when an allowance of 0 denies (the store is not asked then).

        Counts ``cost`` as this region's demand once the input is valid.
        """
        check_key(key)
        check_cost(cost)
        found = check_rates(rates)
        taken = self._taken
        local = self._scaled(found, taken)
        with self._lock:
            self._demand += cost
        for rate, scaled in zip(found, local, strict=True):
            if scaled is None:
                # A share of zero: this region may admit nothing of this rate until a rebalance.
                wait = rate.period_seconds
                return Decision(False, 0, 0, 0.0, wait, rate=rate, cost=cost, refill_after=wait)
        new = [r for r in local if r is not None]
        decided = region_key(key, local, self._apart)
        if not self._carries:
            return decided, new, None
        # A fixed window's count goes on when its global limit is edited, as a plain
        # limiter's does: the key is known by its periods then, and an edit is carried too.
        ident = (key, tuple(r.period_us for r in found) if self._apart else found)
        known = self._book.swap(ident, (found, local))
        if known is None:  # decided on these rates last time: nothing to carry
            return decided, new, None
        olds = list(known)
        before = self._before
        if not known and before is not None and before is not taken:
            # Not seen here yet: another process of the region may have decided it on the
            # rates of the weights taken before these.
            previous = self._scaled(found, before)
            if previous != local:
                olds.append((found, previous))
        if not olds:
            return decided, new, None
        return decided, new, self._carry_flow(key, ident, self._scales(olds, found, new), new)

    def _scales(self, olds: list[Decided], found: tuple[Rate, ...], new: list[Rate]) -> list[Old]:
        """Each old local rate set, with per layer the capacity its share used is taken of:
        the new rate's, or when the global rates were edited since, the old global rate's
        allowance under the current weights (a move of the weights keeps the share used, an
        edit of the limit the count)."""
        found_olds: list[Old] = []
        for rates, old in olds:
            if rates == found:
                scale = tuple(rate.capacity for rate in new)
            else:
                scale = tuple(
                    0 if r is None else r.capacity for r in self._scaled(rates, self._taken)
                )
            found_olds.append((old, scale))
        return found_olds

    def _carry_flow(self, key: str, ident: object, olds: list[Old], new: list[Rate]) -> Flow[None]:
        """``carry_flow``; a carry the store failed (raised, or answered by the limiter's
        failure mode) is forgotten with the key's rates, so that the next hit carries again."""
        try:
            done = yield from carry_flow(self.limiter, key, olds, new, self._apart)
        except StorageError:
            self._book.forget(ident)
            raise
        if not done:
            self._book.forget(ident)

    def take_demand(self) -> int:
        """The cost asked of this region since the last call (allowed or denied), and reset it."""
        with self._lock:
            demand, self._demand = self._demand, 0
        return demand

    def rebalance(self, demand: Mapping[str, int]) -> dict[str, int]:
        """Set the shares from each region's demand of the last interval; returns the weights.

        Every region must call this with the same ``demand`` (what
        ``DemandExchange.collect`` returns once all have published) so that
        their allowances add up to the limit. A key's usage under the old
        allowance is carried to the new one at its next hit (``_carry``; not for
        the sliding algorithms): see docs/regions.md.
        """
        weights = traffic_weights(demand, self.regions)
        self._set(Taken.static(weights), ())
        return weights

    def _set(self, taken: Taken, held: tuple[str, ...]) -> None:
        if taken != self._taken:
            self._before = self._taken
        self._cached = (taken, {})
        self._taken, self._held = taken, held

    def run(self, flow: Flow[T]) -> Any:
        """Drive ``flow`` with the quota's limiter (to be awaited on the asyncio twin)."""
        return self.limiter.run(flow)

    def rebalance_round_flow(
        self, exchange: Exchange[Any], interval: int
    ) -> Flow[dict[str, int] | None]:
        """Run at the start of interval number ``interval`` in every region.

        Publishes this region's demand as that of ``interval - 1``, then reads
        every region's demand of ``interval - 2`` and the weights each took for
        ``interval - 1`` (both published a whole interval ago, so all regions read
        the same). If any is missing, the shares stay as they are and this returns
        None. Otherwise the shares become the new weights of that demand, and the
        allowances the smaller of those and of the newest weights every region has
        taken (see ``_taken``); this returns the new weights. Either way the
        region then publishes the weights it took for ``interval``.
        """
        wanted = type(self)._exchange
        if not isinstance(exchange, wanted):
            raise ConfigurationError(
                f"{type(self).__name__}.rebalance_round takes {named(wanted)}, "
                f"not {named(type(exchange))}"
            )
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
            raise ConfigurationError(
                f"{type(self).__name__}.rebalance_round: interval {interval!r} must be a whole "
                "number >= 0 (the number of the interval that starts now)"
            )
        if exchange.region != self.region or set(exchange.stores) != set(self.regions):
            # A region left out of the exchange would weigh 0 here and not elsewhere: the
            # regions would reach different shares, and the allowances no longer add up.
            raise ConfigurationError(
                f"{type(self).__name__}.rebalance_round: the exchange is region "
                f"{exchange.region!r}'s over {sorted(exchange.stores)}, but this quota is "
                f"region {self.region!r}'s over {sorted(self.regions)}; give it the same "
                "region and every region of the shares"
            )
        yield from exchange.publish_flow(interval - 1, self.take_demand())
        demand, found, missing = yield from exchange.collect_round_flow(interval)
        decoded = {region: decode(text) for region, text in found.items()}
        taken = {region: pair for region, pair in decoded.items() if pair is not None}
        own = taken.get(self.region)
        if own is not None and own != self._taken.pair:
            # What this region published before (it restarted): the others hold it to that.
            self._set(Taken(own.anchor, own.current, self._taken.floor), self._held)
        weights = traffic_weights(demand, self.regions)
        complete = not missing and len(taken) == len(decoded)
        new = Weights.of(interval, weights)
        moved = settle(taken, new) if taken else None
        if taken and moved is None:
            # No weights common to the pairs read: regions given other shares.
            moved = disagree(taken, self.region, self._taken, new if complete else None)
            self._differ(moved[1], taken)
            if not complete:
                self._set(moved[0], self._held)
                moved = None
        elif complete:
            self._differ((), taken)
        else:
            moved = None
        if moved is not None:
            self._set(*moved)
        yield from exchange.publish_taken_flow(interval, self._taken.encode())
        return None if moved is None else weights

    def _differ(self, differing: tuple[str, ...], taken: Mapping[str, Taken]) -> None:
        """Record the regions found on other shares, logged once as they appear or change
        (a warning) and once as they agree again."""
        if differing == self._differing:
            return
        extra = {"region": self.region, "peers": differing}
        if differing:
            found = {region: dict(taken[region].current.weights) for region in differing}
            log.warning(
                "region %s: regions %s took other shares (%s) than this one (%s), with none "
                "in common: each region admits no more than its allowance under any of them "
                "until they agree (give every region the same shares; "
                "docs/regions.md#regions-given-different-shares)",
                self.region, list(differing), found, dict(self._taken.current.weights),
                extra={"event": "region_quota_shares_differ", **extra},
            )  # fmt: skip
        else:
            log.info(
                "region %s: every region takes the same shares again",
                self.region,
                extra={"event": "region_quota_shares_agree", **extra},
            )
        self._differing = differing

    def __repr__(self) -> str:
        return f"{type(self).__name__}(region={self.region!r}, shares={self.shares!r})"


class RegionalQuota(Quota[Limiter]):
    """This region's allowance of each global rate, enforced by ``limiter`` on the local store."""

    _exchange = DemandExchange
    _awaited = False

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Admit ``cost`` if this region's allowance of every rate has room (one local decision)."""
        admitted = self._admit(key, rates, cost)
        if isinstance(admitted, Decision):
            return admitted
        decided, local, carry = admitted
        if carry is not None:
            self.limiter.run(carry)
        return self.limiter.hit(decided, local, cost)

    rebalance_round = blocking(Quota.rebalance_round_flow)


class AsyncRegionalQuota(Quota[AsyncLimiter]):
    """The asyncio twin of ``RegionalQuota``, over an ``AsyncLimiter``: the same allowances,
    ``hit`` and ``rebalance_round`` (with an ``AsyncDemandExchange``) awaited."""

    _exchange = AsyncDemandExchange
    _awaited = True

    async def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """See ``RegionalQuota.hit``."""
        admitted = self._admit(key, rates, cost)
        if isinstance(admitted, Decision):
            return admitted
        decided, local, carry = admitted
        if carry is not None:
            await self.limiter.run(carry)
        return await self.limiter.hit(decided, local, cost)

    rebalance_round = awaiting(Quota.rebalance_round_flow)
