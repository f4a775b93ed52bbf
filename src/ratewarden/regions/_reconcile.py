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
from typing import Any

import redis

from ratewarden.clock import Clock, SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, RatewardenError
from ratewarden.limiter import Limiter
from ratewarden.metrics import NO_METRICS, Metrics
from ratewarden.rate import Rate
from ratewarden.regions import _lua
from ratewarden.regions._bound import _seconds_us, check_weights, overshoot_bound
from ratewarden.regions._gcounter import check_region
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix, escape
from ratewarden.checks import check_cost, check_key
from ratewarden.storage._redis_errors import REDIS_ERRORS, raise_storage_error
from ratewarden.storage.redis import DEFAULT_TIMEOUT, RedisStore

__all__ = ["PeerView", "ReconciledBudget", "SyncReport", "SyncThread"]

log = logging.getLogger("ratewarden.regions")

_MAX_LIMIT = 10**12  # counts are written by Lua as %d of a double: exact far below 2**53
_MIN_PERIOD_US = 1_000
_EXACT = 2**53
#: With an injected clock every TTL is at least a day of Redis time (storage/lua/_prelude.lua).
_INJECTED_TTL_FLOOR_MS = 86_400_000


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

    ``local`` is this region's Redis; ``peers`` maps every other region to a
    client for its Redis (the cross-region link); ``region_rates`` caps each
    region's admissions per key and defines the over-admission ``bound``.
    ``clock`` is for tests: without one, windows follow this region's Redis
    ``TIME`` and round ages the process clock.

    Give ``local`` and the peer clients a ``socket_timeout``: the budget
    scripts and the exchange run on them and wait as long as they do.
    ``timeout`` bounds only the rate-cap store's calls.
    """

    def __init__(
        self,
        region: str,
        local: redis.Redis,
        peers: Mapping[str, redis.Redis],
        region_rates: Mapping[str, Rate],
        *,
        sync_interval: float,
        replication_lag: float,
        weights: Mapping[str, int | float] | None = None,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        metrics: Metrics = NO_METRICS,
        max_keys: int = 10_000,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.region = check_region(region)
        self._check_regions(peers, region_rates)
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
        self.prefix = check_prefix(prefix)
        self.metrics = metrics
        self.local = local
        # The scripts run on the caller's client, bounded by its own socket timeout.
        self._local_timeout = float(
            local.connection_pool.connection_kwargs.get("socket_timeout") or 0
        )
        self.peers = dict(peers)
        self._clock = clock
        self.clock: Clock = clock if clock is not None else SystemClock()
        store = RedisStore(local, clock=clock, prefix=f"{prefix}:region-rate", timeout=timeout)
        self._rate_cap = Limiter(store)
        self._hit_script = local.register_script(_lua.HIT)
        self._merge_script = local.register_script(_lua.MERGE)
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
        capped = self._rate_cap.hit(key, self.region_rate, cost)
        if not capped.allowed:
            return capped
        member = f"{rate.limit}:{rate.period_us}:{key}"
        args = [self._now_arg(), rate.period_us, self.region, cost, self.default_cap(rate)]
        try:
            reply = self._hit_script(keys=[self._hash_key(member)], args=args)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, f"region {self.region}", self._local_timeout)
        self._remember(member, rate)
        allowed, own, cap, reset_us = (int(v) for v in reply)
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

    def _now_arg(self) -> int | str:
        return "" if self._clock is None else self._clock.now_us()

    def _hash_key(self, member: str) -> str:
        limit, period_us, key = member.split(":", 2)
        return f"{self.prefix}:{{{escape(key)}}}:region:{limit}:{period_us}"

    def _active_key(self, region: str) -> str:
        return f"{self.prefix}:regions:active:{region}"

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
        self._publish(started)
        with self._lock:
            members = set(self._active)
        failed: list[str] = []
        for peer, client in self.peers.items():
            try:
                members.update(self._peer_members(client, peer, started))
            except REDIS_ERRORS as exc:
                log.warning("region %s: peer %s did not list its keys: %r", self.region, peer, exc)
                failed.append(peer)
        ordered = sorted(members)
        states: dict[str, list[tuple[int, str, int]]] = {m: [] for m in ordered}
        for peer, client in self.peers.items():
            if peer in failed:
                continue
            try:
                self._read_counts(client, ordered, states)
            except REDIS_ERRORS as exc:
                log.warning("region %s: peer %s did not send counts: %r", self.region, peer, exc)
                failed.append(peer)
        frozen = tuple((m, tuple(states[m])) for m in ordered)
        return PeerView(started, frozen, tuple(failed))

    def _publish(self, now_us: int) -> None:
        with self._lock:
            for member in [m for m, until in self._active.items() if until <= now_us]:
                del self._active[member]
            entries = dict(self._active)
        key = self._active_key(self.region)
        try:
            pipe = self.local.pipeline(transaction=False)
            pipe.zremrangebyscore(key, "-inf", now_us)
            if entries:
                pipe.zadd(key, entries)
                ttl_ms = max(1, (max(entries.values()) - now_us) // 1_000)
                if self._clock is not None:
                    # Redis counts the TTL in real time, which may run ahead of an
                    # injected clock; the scores say what is live (as in the scripts).
                    ttl_ms = max(ttl_ms, _INJECTED_TTL_FLOOR_MS)
                pipe.pexpire(key, ttl_ms)
            pipe.execute()
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, f"region {self.region}", self._local_timeout)

    def _peer_members(self, client: redis.Redis, peer: str, now_us: int) -> list[str]:
        raw = client.zrangebyscore(
            self._active_key(peer), now_us, "+inf", start=0, num=self.max_keys
        )
        return [m.decode() if isinstance(m, bytes) else str(m) for m in raw]

    def _read_counts(
        self,
        client: redis.Redis,
        members: list[str],
        states: dict[str, list[tuple[int, str, int]]],
    ) -> None:
        pipe = client.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(self._hash_key(member))
        for member, fields in zip(members, pipe.execute(), strict=True):
            states[member].extend(_triples(fields))

    def apply(self, view: PeerView) -> SyncReport:
        """Merge ``view`` into the local hashes; recompute caps if it is complete and fresh."""
        stale = self.clock.now_us() - view.started_us > self._lag_us
        complete = not view.failed and not stale
        overshoot = 0
        if view.states:
            try:
                replies = self._merge_all(view, complete)
            except REDIS_ERRORS as exc:
                raise_storage_error(exc, f"region {self.region}", self._local_timeout)
            for (member, _), reply in zip(view.states, replies, strict=True):
                limit = int(member.split(":", 1)[0])
                overshoot = max(overshoot, int(reply[1]) - limit)
        self.metrics.region_overshoot(region=self.region, requests=overshoot)
        return SyncReport(len(view.states), complete, stale, view.failed, overshoot)

    def _merge_all(self, view: PeerView, complete: bool) -> list[Any]:
        pipe = self.local.pipeline(transaction=False)
        share = self._share
        for member, triples in view.states:
            limit, period_us, _ = member.split(":", 2)
            args: list[int | str] = [
                self._now_arg(),
                int(period_us),
                self.region,
                int(limit),
                share.numerator,
                share.denominator,
                "1" if complete else "0",
            ]
            for window, region, count in triples:
                args.extend((window, region, count))
            self._merge_script(keys=[self._hash_key(member)], args=args, client=pipe)
        return list(pipe.execute())

    def __repr__(self) -> str:
        return (
            f"ReconciledBudget(region={self.region!r}, peers={sorted(self.peers)}, "
            f"sync_interval={self.sync_interval}, replication_lag={self.replication_lag}, "
            f"bound={self.bound})"
        )


def _triples(fields: Mapping[Any, Any]) -> list[tuple[int, str, int]]:
    """A peer's hash as (window, region, count) entries; an empty hash has none."""
    decoded = {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in fields.items()}
    window = decoded.get("w")
    if window is None:
        return []
    return [(window, name[2:], count) for name, count in decoded.items() if name.startswith("c:")]


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
