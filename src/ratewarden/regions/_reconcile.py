"""ReconciledBudget: each region enforces locally and reconciles counts every sync interval.

A region decides every request on its own Redis, with no cross-region call on
the request path. Per (key, global rate) and window it keeps a G-counter entry
per region and a budget (``cap``) for itself. Every ``sync_interval`` a round:

1. ``fetch``: publish the keys this region used, read every peer's list of
   keys, then every peer's counts for the union (two round trips per peer);
2. ``apply``: merge those counts into the local hashes by max per region and,
   if every peer answered and the data is no older than ``replication_lag``,
   recompute ``cap = own + floor(share * (limit - merged total)+)``.

``share`` is this region's weight over the sum of weights (by default each
region's rate cap in requests per second), so the caps of one instant sum to
at most the limit; the limit is overshot only by what other regions admitted
after the counts were read, which ``overshoot_bound`` caps. A region's own
rate is capped by a GCRA limit (``region_rates[region]``) checked before the
budget: the bound needs the rate to be enforced, not assumed.

Both checks are decisions of a ``Limiter`` over this region's ``RegionStore``
(the cap its ``hit``, the budget its script through ``apply_flow``); the rounds
call the stores' exchange methods. Every Redis call is the stores'.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ratewarden.checks import check_cost, check_key
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, RatewardenError, StorageError
from ratewarden.limiter import Limiter
from ratewarden.metrics import NO_METRICS, Metrics
from ratewarden.rate import Rate
from ratewarden.regions._bound import _seconds_us, check_weights, overshoot_bound
from ratewarden.regions._gcounter import check_region
from ratewarden.regions._stores import check_stores, deprecated_clients, is_client

if TYPE_CHECKING:
    import redis

    from ratewarden.storage.regions import RegionStore

__all__ = ["PeerView", "ReconciledBudget", "SyncReport", "SyncThread"]

log = logging.getLogger("ratewarden.regions")

_MAX_LIMIT = 10**12  # counts are written by Lua as %d of a double: exact far below 2**53
_MIN_PERIOD_US = 1_000
_EXACT = 2**53


def _one_rate(rates: Rate | Sequence[Rate]) -> Rate:
    found = (rates,) if isinstance(rates, Rate) else tuple(rates)
    if len(found) != 1 or not isinstance(found[0], Rate):
        raise ConfigurationError(
            f"ReconciledBudget takes exactly one global Rate per hit, got {rates!r}; "
            "layered limits across regions are not built"
        )
    rate = found[0]
    if rate.limit > _MAX_LIMIT or rate.period_us < _MIN_PERIOD_US:
        raise ConfigurationError(
            f"global rate {rate} is out of range for reconciliation: the limit must be at most "
            f"{_MAX_LIMIT:,} and the period at least 1 ms"
        )
    return rate


@dataclass(frozen=True, slots=True)
class PeerView:
    """What one ``fetch`` read: per member (rate and key), the peers' (window, region, count)."""

    started_us: int
    states: tuple[tuple[str, tuple[tuple[int, str, int], ...]], ...]
    failed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One round: keys merged, whether caps were recomputed, the worst overshoot seen."""

    keys: int
    complete: bool
    stale: bool
    failed: tuple[str, ...]
    overshoot: int


class ReconciledBudget:
    """A global limit enforced per region on the region's own Redis, reconciled every interval.

    ``local`` is this region's ``RegionStore``; ``peers`` maps every other region
    to a ``RegionStore`` on its Redis (reached over the cross-region link); both
    come from ``ratewarden.storage.regions``, all with one key prefix.
    ``region_rates`` caps each region's admissions per key and defines the
    over-admission ``bound``. Windows and a round's age follow ``local.clock``
    (give the store a clock in tests; without one, windows follow this region's
    Redis ``TIME``).

    Give the stores' clients a ``socket_timeout``: the budget script and the
    exchange run on them and wait as long as they do. ``local``'s ``timeout``
    bounds only the rate cap's calls.

    Deprecated, for one release: redis clients for ``local`` and ``peers``, with
    ``clock``, ``prefix`` and ``timeout`` for the stores made from them (a
    ``DeprecationWarning``). With stores, those three are the stores' own.
    """

    def __init__(
        self,
        region: str,
        local: RegionStore | redis.Redis,
        peers: Mapping[str, RegionStore] | Mapping[str, redis.Redis],
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
        self.region = check_region(region)
        self._check_regions(peers, region_rates)
        if is_client(local):
            clients = {region: local, **peers}
            options = {"clock": clock, "prefix": prefix, "timeout": timeout}
            stores = deprecated_clients("ReconciledBudget", clients, **options)
        elif clock is not None or prefix is not None or timeout is not None:
            raise ConfigurationError(
                "ReconciledBudget: clock, prefix and timeout belong to the stores "
                "(RegionStore(client, clock=..., prefix=..., timeout=...)), not to the budget"
            )
        else:
            stores = check_stores("ReconciledBudget", {region: local, **peers})
        self.region_rates = dict(region_rates)
        self.region_rate = region_rates[region]
        self.sync_interval = float(sync_interval)
        self.replication_lag = float(replication_lag)
        #: Requests a window may be over its limit, at most, while rounds keep up.
        self.bound = overshoot_bound(region_rates, sync_interval, replication_lag)
        self._lag_us = _seconds_us("replication_lag", replication_lag, zero_ok=True)
        self._share = self._own_share(weights)
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(f"max_keys {max_keys!r} must be a whole number >= 1")
        self.max_keys = max_keys
        self.metrics = metrics
        self.local = stores.pop(region)
        self.peers = stores
        self.prefix = self.local.prefix
        self.clock: Clock = self.local.clock
        # Every decision goes through the limiter: the rate cap (GCRA on the store's
        # ``hit``), then the budget (the store's script, through ``apply_flow``).
        self._limiter = Limiter(self.local)
        # member ("<limit>:<period_us>:<key>") -> the time until which peers should sync it
        self._active: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def _check_regions(self, peers: Mapping[str, Any], region_rates: Mapping[str, Any]) -> None:
        for name in (*peers, *region_rates):
            check_region(name)
        if self.region in peers:
            raise ConfigurationError(f"peers name this region {self.region!r}; list only others")
        expected = {self.region, *peers}
        if set(region_rates) != expected:
            raise ConfigurationError(
                f"region_rates names {sorted(region_rates)}, but the regions are "
                f"{sorted(expected)}: give every region (this one and each peer) a rate"
            )

    def _own_share(self, weights: Mapping[str, int | float] | None) -> Fraction:
        if weights is None:
            exact = {
                r: Fraction(rate.limit * 1_000_000, rate.period_us)
                for r, rate in self.region_rates.items()
            }
        else:
            if set(weights) != set(self.region_rates):
                raise ConfigurationError(
                    f"weights name {sorted(weights)}; they must name exactly the regions "
                    f"{sorted(self.region_rates)}"
                )
            exact = check_weights(weights)
        share = exact[self.region] / sum(exact.values())
        if share.numerator * _MAX_LIMIT >= _EXACT or share.denominator >= _EXACT:
            raise ConfigurationError(
                f"region {self.region!r}'s share {share} has too many digits to compute exactly; "
                "pass weights= with small whole numbers"
            )
        return share

    # -- the request path: local only

    def default_cap(self, rate: Rate) -> int:
        """This region's budget in a window before its first complete round: its share."""
        return rate.limit * self._share.numerator // self._share.denominator

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Admit ``cost`` under the global ``rates`` (one Rate) if the region rate and budget allow.

        One GCRA decision for the region's rate cap, then one script for the
        budget, both on this region's Redis. Raises ``StorageUnavailableError``
        when it does not answer.
        """
        rate = _one_rate(rates)
        check_key(key)
        check_cost(cost)
        limiter = self._limiter
        # The limiter's own fast path for the rate cap: a plain limiter's hit is one store call.
        capped = limiter.hit(key, self.region_rate, cost)
        if not capped.allowed:
            return capped
        member = f"{rate.limit}:{rate.period_us}:{key}"
        op = self.local.budget_hit(member, self.region, cost, self.default_cap(rate))
        allowed, own, cap, reset_us = limiter.run(limiter.apply_flow(op))
        self._remember(member, rate)
        reset_after = reset_us / 1_000_000
        retry_after = 0.0 if allowed else (math.inf if cost > rate.limit else reset_after)
        return Decision(
            allowed=bool(allowed),
            limit=rate.limit,
            remaining=max(0, cap - own),
            reset_after=reset_after,
            retry_after=retry_after,
            rate=rate,
            cost=cost,
            # A window's budget: nothing more than remaining before it ends (a sync may
            # raise the cap sooner, but nothing here can promise that).
            refill_after=reset_after,
        )

    def _hash_key(self, member: str) -> str:
        return self.local.budget_key(member)

    def _remember(self, member: str, rate: Rate) -> None:
        until = self.clock.now_us() + 2 * rate.period_us
        with self._lock:
            if member not in self._active and len(self._active) >= self.max_keys:
                # Past max_keys a key keeps its static share: safe, only less adaptive.
                return
            self._active[member] = until
            self._active.move_to_end(member)

    # -- the sync round: the only cross-region calls

    def sync(self) -> SyncReport:
        """One round: ``apply(fetch())``."""
        return self.apply(self.fetch())

    def fetch(self) -> PeerView:
        """Publish this region's keys, then read every peer's keys and counts."""
        started = self.clock.now_us()
        with self._lock:
            for member in [m for m, until in self._active.items() if until <= started]:
                del self._active[member]
            entries = dict(self._active)
        self.local.publish_active(self.region, entries, started)
        with self._lock:
            members = set(self._active)
        failed: list[str] = []
        for peer, store in self.peers.items():
            try:
                members.update(store.active(peer, started, self.max_keys))
            except StorageError as exc:
                log.warning("region %s: peer %s did not list its keys: %r", self.region, peer, exc)
                failed.append(peer)
        ordered = sorted(members)
        states: dict[str, list[tuple[int, str, int]]] = {m: [] for m in ordered}
        for peer, store in self.peers.items():
            if peer in failed:
                continue
            try:
                counts = store.read_counts(ordered)
            except StorageError as exc:
                log.warning("region %s: peer %s did not send counts: %r", self.region, peer, exc)
                failed.append(peer)
                continue
            for member, found in zip(ordered, counts, strict=True):
                states[member].extend(found)
        frozen = tuple((m, tuple(states[m])) for m in ordered)
        return PeerView(started, frozen, tuple(failed))

    def apply(self, view: PeerView) -> SyncReport:
        """Merge ``view`` into the local hashes; recompute caps if it is complete and fresh."""
        stale = self.clock.now_us() - view.started_us > self._lag_us
        complete = not view.failed and not stale
        overshoot = 0
        if view.states:
            share = (self._share.numerator, self._share.denominator)
            ops = [
                self.local.budget_merge(member, self.region, share, complete, entries)
                for member, entries in view.states
            ]
            replies = self.local.apply_all(ops)
            for (member, _), reply in zip(view.states, replies, strict=True):
                limit = int(member.split(":", 1)[0])
                overshoot = max(overshoot, reply[1] - limit)
        self.metrics.region_overshoot(region=self.region, requests=overshoot)
        return SyncReport(len(view.states), complete, stale, view.failed, overshoot)

    def __repr__(self) -> str:
        return (
            f"ReconciledBudget(region={self.region!r}, peers={sorted(self.peers)}, "
            f"sync_interval={self.sync_interval}, replication_lag={self.replication_lag}, "
            f"bound={self.bound})"
        )


class SyncThread:
    """Runs ``budget.sync()`` every ``sync_interval`` seconds of real time in a daemon thread.

    A round that fails (this region's Redis down) is logged and retried at the
    next interval; caps are then not recomputed, so the budget does not grow.
    """

    def __init__(self, budget: ReconciledBudget) -> None:
        self.budget = budget
        #: Rounds run, and those that recomputed the caps (every peer answered in time).
        self.rounds = 0
        self.complete_rounds = 0
        self.last: SyncReport | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"ratewarden-sync-{budget.region}", daemon=True
        )

    def start(self) -> SyncThread:
        """Start the rounds; returns self."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the current round (waiting at most ``timeout`` seconds)."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        interval = self.budget.sync_interval
        wait = interval
        while not self._stop.wait(wait):
            started = time.monotonic()
            try:
                self.last = self.budget.sync()
                self.complete_rounds += self.last.complete
            except RatewardenError as exc:
                log.warning("region %s: sync round failed: %s", self.budget.region, exc)
            self.rounds += 1
            # Rounds start every interval, however long one took (the bound assumes so).
            wait = max(0.0, interval - (time.monotonic() - started))

    def __enter__(self) -> SyncThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
