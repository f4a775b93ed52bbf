"""ReconciledBudget / AsyncReconciledBudget: each region enforces locally and reconciles counts
every sync interval.

A region decides every request on its own Redis, with no cross-region call on
the request path. Per (key, global rate) and window it keeps a G-counter entry
per region and a budget (``cap``) for itself. Every ``sync_interval`` a round:

1. ``fetch``: publish the keys this region used, read every peer's list of
   keys, then every peer's counts for the union (two round trips per peer);
2. ``apply``: merge those counts into the local hashes by max per region and,
   if every peer answered and the data is no older than ``replication_lag``,
   recompute ``cap = own + floor(share * (limit - merged total - held)+)``, then
   record on this region's Redis that it completed a round.

``held``: a peer that answers but completed no round in the last ``silence``
(``2 * sync_interval + replication_lag``; it cannot read its peers) keeps its cap,
so it counts as spending all of it (its cap, else its default share) rather than
having its unspent part split again. Peers get ``silence`` from the budget's start.

``share`` is this region's weight over the sum of weights (by default each
region's rate cap in requests per second), so the caps of one instant sum to
at most the limit; the limit is overshot only by what other regions admitted
after the counts were read, which ``overshoot_bound`` caps. A region's own
rate is capped by a GCRA limit (``region_rates[region]``) checked before the
budget: the bound needs the rate to be enforced, not assumed.

Everything is written once, in ``Reconciler``: the checks, and ``hit``,
``fetch``, ``apply`` and ``sync`` as flows (``ratewarden.limiter``) over the pure
arithmetic of ``_rounds`` (the share, a hit's Decision, a round's overshoot). A
flow asks for each store call; the budget's limiter over this region's store
runs it, blocking (``ReconciledBudget``, on ``RegionStore``s) or awaited
(``AsyncReconciledBudget``, on ``AsyncRegionStore``s, reading the peers side
by side). Both checks of a hit are that limiter's decisions (the cap its
``hit_flow``, the budget its script through ``apply_flow``); the rounds ask the
stores' exchange methods. Every Redis call is the stores'.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ratewarden.checks import check_cost, check_key, keywords_checked
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Ask, AsyncLimiter, Gather, Limiter, awaiting, blocking, check_metrics
from ratewarden.metrics import NO_METRICS, Metrics
from ratewarden.rate import Rate
from ratewarden.regions._bound import _seconds_us
from ratewarden.regions._gcounter import check_region
from ratewarden.regions._peers import PeerWatch
from ratewarden.regions._rounds import (
    PeerView,
    SyncReport,
    budget_decision,
    capped_decision,
    check_regions,
    global_rates,
    holds,
    overshoot,
    own_share,
    round_error,
    shares,
    timing,
)
from ratewarden.regions._stores import check_stores, deprecated_clients, is_client

if TYPE_CHECKING:
    import redis

    from ratewarden.limiter import Flow
    from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
    from ratewarden.storage.regions import AsyncRegionStore, RegionStore

__all__ = ["AsyncReconciledBudget", "PeerView", "ReconciledBudget", "Reconciler", "SyncReport"]

log = logging.getLogger("ratewarden.regions")

#: The limiter a twin decides and runs its flows with.
L = TypeVar("L", Limiter, AsyncLimiter)
T = TypeVar("T")


class Reconciler(Generic[L]):
    """Everything of a reconciled budget but the waiting: its twins run these flows.

    ``_stores`` (each twin's) checks and returns the stores, region -> store.
    """

    #: ``Limiter`` or ``AsyncLimiter``: what the twin builds over this region's store.
    _driver: ClassVar[Callable[[Any], Any]]

    @keywords_checked
    def __init__(
        self,
        region: str,
        local: Any,
        peers: Mapping[str, Any],
        region_rates: Mapping[str, Rate],
        *,
        sync_interval: float,
        replication_lag: float,
        weights: Mapping[str, int | float] | None = None,
        metrics: Metrics = NO_METRICS,
        max_keys: int = 10_000,
    ) -> None:
        self.region = check_region(region)
        check_regions(self.region, peers, region_rates)
        stores = self._stores(local, peers)
        self.region_rates = dict(region_rates)
        self.region_rate = region_rates[region]
        #: Requests a window may be over its limit, at most, while rounds keep up.
        self.bound, self._lag_us = timing(
            type(self).__name__, region_rates, sync_interval, replication_lag
        )
        self.sync_interval = float(sync_interval)
        self.replication_lag = float(replication_lag)
        self._share = own_share(self.region, self.region_rates, weights)
        self._shares = shares(self.region_rates, weights)
        #: A peer whose last complete round is older than this is held at its budget.
        self.silence = 2 * self.sync_interval + self.replication_lag
        self._silence_us = _seconds_us("silence", self.silence, zero_ok=False)
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(f"max_keys {max_keys!r} must be a whole number >= 1")
        self.max_keys = max_keys
        self.metrics = check_metrics(
            type(self).__name__, metrics, ("region_overshoot",), none_ok=False
        )
        self.local = stores.pop(region)
        self.peers = stores
        self.prefix: str = self.local.prefix
        self.clock: Clock = self.local.clock
        # Every decision goes through the limiter: the rate cap (GCRA on the store's
        # ``hit``), then the budget (the store's script, through ``apply_flow``).
        self._limiter: L = type(self)._driver(self.local)
        # member ("<limit>:<period_us>:<key>") -> the time until which peers should sync it
        self._active: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        #: What rounds learn of peers (silent ones, given ``silence`` from now; their regions).
        self.watch = PeerWatch(region, self.region_rates, self.clock.now_us(), self._silence_us)

    def _stores(self, local: Any, peers: Mapping[str, Any]) -> dict[str, Any]:
        """Every region's store, this one's included, once each twin has checked them."""
        raise NotImplementedError

    def run(self, flow: Flow[T]) -> Any:
        """Drive ``flow`` (one of the ``*_flow`` methods) with the budget's limiter:
        ``limiter.run(flow)``, to be awaited on the asyncio twin."""
        return self._limiter.run(flow)

    # -- the request path: local only

    def default_cap(self, rate: Rate) -> int:
        """This region's budget in a window before its first complete round: its share; 0
        while a peer runs without this region (``PeerWatch``: it does not count this one)."""
        if self.watch.unlisted:
            return 0
        return rate.limit * self._share.numerator // self._share.denominator

    def hit_flow(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Flow[Decision]:
        """Admit ``cost`` under the global ``rates`` if the region rate and budget allow.

        ``rates`` is one Rate, or several for a layered limit (a burst and a quota, say):
        each is reconciled on its own, and a hit is admitted only if every one's budget
        has room, then charged to all (all or nothing). One GCRA decision for the region's
        rate cap, then one script for the budgets (a key's layers share its hash tag),
        both on this region's Redis. Raises ``StorageUnavailableError`` when it does not answer.
        """
        found = global_rates(type(self).__name__, rates)
        check_key(key)
        check_cost(cost)
        limiter = self._limiter
        capped = yield from limiter.hit_flow(key, self.region_rate, cost)
        members = [f"{rate.limit}:{rate.period_us}:{key}" for rate in found]
        layers = [(m, self.default_cap(r)) for m, r in zip(members, found, strict=True)]
        if not capped.allowed:  # the budgets as they stand (cost 0 charges nothing)
            op = self.local.budget_hit_layers(layers, self.region, 0)
            return capped_decision(capped, (yield from limiter.apply_flow(op)), found, cost)
        reply = yield from limiter.apply_flow(
            self.local.budget_hit_layers(layers, self.region, cost)
        )
        for member, rate in zip(members, found, strict=True):
            self._remember(member, rate)
        return budget_decision(reply, found, cost)

    def _hash_key(self, member: str) -> str:
        return str(self.local.budget_key(member))

    def _remember(self, member: str, rate: Rate) -> None:
        until = self.clock.now_us() + 2 * rate.period_us
        with self._lock:
            if member not in self._active and len(self._active) >= self.max_keys:
                # Past max_keys a key keeps its static share: safe, only less adaptive.
                return
            self._active[member] = until
            self._active.move_to_end(member)

    # -- the sync round: the only cross-region calls

    def sync_flow(self) -> Flow[SyncReport]:
        """One round: ``apply(fetch())``."""
        view = yield from self.fetch_flow()
        return (yield from self.apply_flow(view))

    def fetch_flow(self) -> Flow[PeerView]:
        """Publish this region's keys, then read every peer's keys and counts."""
        started = self.clock.now_us()
        with self._lock:
            for member in [m for m, until in self._active.items() if until <= started]:
                del self._active[member]
            entries = dict(self._active)
        regions = self.watch.regions
        published = yield Ask(self.local.publish_active, (self.region, entries, started, regions))
        if isinstance(published, Exception):
            raise published
        with self._lock:
            members = set(self._active)
        peers = tuple(self.peers.items())
        listed = yield Gather(
            tuple(
                self._peer_flow(p, "did not list its keys", s.active, p, started, self.max_keys)
                for p, s in peers
            )
        )
        failed = [peer for (peer, _), found in zip(peers, listed, strict=True) if found is None]
        for found in listed:
            members.update(found or ())
        ordered = sorted(members)
        asked = tuple((peer, store) for peer, store in peers if peer not in failed)
        read = yield Gather(
            tuple(
                self._peer_flow(p, "did not send counts", s.read_round, p, ordered)
                for p, s in asked
            )
        )
        states: dict[str, list[tuple[int, str, int]]] = {m: [] for m in ordered}
        budgets: dict[str, list[tuple[int, str, int]]] = {m: [] for m in ordered}
        rounds: list[tuple[str, int | None]] = []
        configs: list[tuple[str, tuple[str, ...] | None]] = []
        for (peer, _), found in zip(asked, read, strict=True):
            if found is None:
                failed.append(peer)
                continue
            rounds.append((peer, found.last_round))
            configs.append((peer, found.regions))
            for member, entries_found, (window, cap) in zip(
                ordered, found.entries, found.budgets, strict=True
            ):
                states[member].extend(entries_found)
                budgets[member].append((window, peer, cap))
        frozen = tuple((m, tuple(states[m])) for m in ordered)
        held = tuple(tuple(budgets[m]) for m in ordered)
        return PeerView(started, frozen, tuple(failed), tuple(rounds), held, tuple(configs))

    def _peer_flow(self, peer: str, what: str, method: Callable[..., Any], *args: Any) -> Flow[Any]:
        """One exchange call to ``peer``: its answer, or None (logged) when it failed."""
        reply = yield Ask(method, args)
        if isinstance(reply, StorageError):
            text = "region %s: peer %s %s: %s; the round leaves the cap as it was"  # error: filters
            log.warning(text, self.region, peer, what, round_error(reply), extra={"error": reply})
            return None
        if isinstance(reply, Exception):
            raise reply
        return reply

    def apply_flow(self, view: PeerView) -> Flow[SyncReport]:
        """Merge ``view`` into the local hashes; recompute caps if it is complete and fresh."""
        now = self.clock.now_us()
        stale = now - view.started_us > self._lag_us
        complete = not view.failed and not stale
        silent = self.watch.silent(view) if complete else ()
        differing = self.watch.configs(view.configs)
        worst = 0
        if view.states:
            share = (self._share.numerator, self._share.denominator)
            kept = sorted(set(silent).union(differing)) if complete else []
            held = holds(view, kept, self._shares, differing)
            ops = [
                self.local.budget_merge(member, self.region, share, complete, entries, hold)
                for (member, entries), hold in zip(view.states, held, strict=True)
            ]
            replies = yield Ask(self.local.apply_all, (ops,))
            for reply in [replies] if isinstance(replies, Exception) else replies:
                if isinstance(reply, Exception):  # the store's failure, or one merge's: the round's
                    raise reply
            worst = overshoot(view, replies)
        if complete:
            recorded = yield Ask(self.local.finish_round, (self.region, now))
            if isinstance(recorded, Exception):
                raise recorded
        self.metrics.region_overshoot(region=self.region, requests=worst)
        return SyncReport(len(view.states), complete, stale, view.failed, worst, silent, differing)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(region={self.region!r}, peers={sorted(self.peers)}, "
            f"sync_interval={self.sync_interval}, replication_lag={self.replication_lag}, "
            f"bound={self.bound})"
        )


class ReconciledBudget(Reconciler[Limiter]):
    """A global limit enforced per region on the region's own Redis, reconciled every interval.

    ``local`` is this region's ``RegionStore``; ``peers`` maps every other region
    to a ``RegionStore`` on its Redis (reached over the cross-region link); both
    come from ``ratewarden.storage.regions``, all with one key prefix. With no
    Redis, a ``MemoryRegionStore`` per region instead (``ratewarden.storage.memory_regions``).
    ``region_rates`` caps each region's admissions per key and defines the
    over-admission ``bound``. Windows and a round's age follow ``local.clock``
    (give the store a clock in tests; without one, windows follow this region's
    Redis ``TIME``).

    Give the stores' clients a ``socket_timeout``: the budget script and the exchange run
    on them and wait as long as they do. ``local``'s ``timeout`` bounds only the rate
    cap's calls. A round reads the peers one after another.

    Deprecated, for one release: redis clients for ``local`` and ``peers``, with
    ``clock``, ``prefix`` and ``timeout`` for the stores made from them (a
    ``DeprecationWarning``). With stores, those three are the stores' own.
    """

    _driver = Limiter
    local: RegionStore | MemoryRegionStore
    peers: dict[str, RegionStore | MemoryRegionStore]

    @keywords_checked
    def __init__(
        self,
        region: str,
        local: RegionStore | MemoryRegionStore | redis.Redis,
        peers: Mapping[str, RegionStore | MemoryRegionStore] | Mapping[str, redis.Redis],
        region_rates: Mapping[str, Rate],
        *,
        sync_interval: float,
        replication_lag: float,
        weights: Mapping[str, int | float] | None = None,
        metrics: Metrics = NO_METRICS,
        max_keys: int = 10_000,
        clock: Clock | None = None,
        prefix: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self._options = {"clock": clock, "prefix": prefix, "timeout": timeout}
        super().__init__(
            region,
            local,
            peers,
            region_rates,
            sync_interval=sync_interval,
            replication_lag=replication_lag,
            weights=weights,
            metrics=metrics,
            max_keys=max_keys,
        )

    def _stores(self, local: Any, peers: Mapping[str, Any]) -> dict[str, Any]:
        given = {self.region: local, **peers}
        if is_client(local):
            # The warning names the caller of ReconciledBudget(...), past two keyword checks.
            return deprecated_clients("ReconciledBudget", given, stacklevel=7, **self._options)
        if any(value is not None for value in self._options.values()):
            raise ConfigurationError(
                "ReconciledBudget: clock, prefix and timeout belong to the stores "
                "(RegionStore(client, clock=..., prefix=..., timeout=...)), not to the budget"
            )
        return check_stores("ReconciledBudget", given)

    hit = blocking(Reconciler.hit_flow)
    sync = blocking(Reconciler.sync_flow)
    fetch = blocking(Reconciler.fetch_flow)
    apply = blocking(Reconciler.apply_flow)


class AsyncReconciledBudget(Reconciler[AsyncLimiter]):
    """The asyncio twin of ``ReconciledBudget``: the same arguments (but the deprecated ones)
    and answers, with an ``AsyncRegionStore`` (``ratewarden.storage.regions``, on a
    ``redis.asyncio.Redis`` or ``RedisCluster``) for this region and each peer, and
    ``hit``, ``fetch``, ``apply`` and ``sync`` awaited.

    A round reads the peers side by side, so it takes two round trips to the
    slowest peer rather than two per peer. ``SyncTask`` runs the rounds.
    """

    _driver = AsyncLimiter
    local: AsyncRegionStore | AsyncMemoryRegionStore
    peers: dict[str, AsyncRegionStore | AsyncMemoryRegionStore]

    def _stores(self, local: Any, peers: Mapping[str, Any]) -> dict[str, Any]:
        given = {self.region: local, **peers}
        return check_stores("AsyncReconciledBudget", given, awaited=True)

    hit = awaiting(Reconciler.hit_flow)
    sync = awaiting(Reconciler.sync_flow)
    fetch = awaiting(Reconciler.fetch_flow)
    apply = awaiting(Reconciler.apply_flow)
