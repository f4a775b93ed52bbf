"""RegionStore: one region's Redis as the multi-region budgets use it (``ratewarden.regions``).

Make one per region, on that region's ``redis.Redis`` client (a standalone
server or a Sentinel primary; a Redis Cluster per region is not built), and
hand them to ``ReconciledBudget`` (this region's and every peer's) or to
``DemandExchange``::

    local = RegionStore(redis.Redis(host="redis.eu.internal", socket_timeout=0.05))
    peer = RegionStore(redis.Redis(host="redis.us.internal", socket_timeout=0.5))

It is three things:

- a ``Store`` for the limiter of the regions' rate caps: ``hit`` runs on a
  ``RedisStore`` under ``<prefix>:region-rate`` (apart from the application's
  own limits on the same Redis), each call bounded by ``timeout``;
- ``apply(op)`` for the reconciled budget's script (``lua/region_budget.lua``),
  whose ``Op``s ``budget_hit`` and ``budget_merge`` build; the budget runs them
  through its limiter (``apply_flow``), or several in one round trip with
  ``apply_all`` (a sync round's merge);
- the exchange: pipelined writes and reads of the active-key sets and window
  hashes (sync rounds) and of the demand counts (``DemandExchange``).

The script and the exchange run on the caller's client, so they wait as long
as its ``socket_timeout`` lets them: give it one. Every Redis error becomes
``StorageUnavailableError`` (or ``StorageError``) here, at the one boundary.

Key schema (``prefix`` is ``rw`` by default; every region must use the same):

- ``<prefix>:{<escaped key>}:region:<limit>:<period_us>``: the window hash of one
  (key, global rate), see ``lua/region_budget.lua``;
- ``<prefix>:regions:active:<region>``: a sorted set of the members a region
  used, each scored by the time (us) until which peers should sync it;
- ``<prefix>:regions:demand:<region>``: a hash, interval number -> the demand a
  region counted in that interval.

A *member*, ``<limit>:<period_us>:<key>``, names one (global rate, key) in the exchange.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix, escape
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_clients import sync_client
from ratewarden.storage._redis_errors import REDIS_ERRORS, raise_storage_error
from ratewarden.storage._redis_link import describe
from ratewarden.storage._redis_store import DEFAULT_TIMEOUT, FromUrl
from ratewarden.storage._redis_url import parse
from ratewarden.storage._scripts import script
from ratewarden.storage.redis import RedisStore

__all__ = ["RegionStore"]

_SCRIPT = "region_budget"
#: With an injected clock every TTL is at least a day of Redis time (lua/_prelude.lua).
_INJECTED_TTL_FLOOR_MS = 86_400_000
#: A region's demand counts: the intervals kept, and how long the hash outlives a write.
_DEMAND_INTERVALS = 4
_DEMAND_TTL_S = 3600
#: One (window, region, count) entry of a region's window hash.
Entry = tuple[int, str, int]


def _redis_only(args: Sequence[int | str], states: list[Any], now_us: int) -> Any:
    """The in-process twin an ``Op`` carries: there is none for a region's budget."""
    raise ConfigurationError(
        "a reconciled budget runs on Redis only: its script has no in-process twin, so a "
        "MemoryStore cannot run it; give ReconciledBudget a RegionStore "
        "(ratewarden.storage.regions) for its region and for each peer"
    )


def _region_client(url: str, timeout: float, options: dict[str, Any]) -> redis.Redis:
    """The client of one region: a server or a Sentinel's primary, never a Cluster."""
    if parse(url).kind == "cluster":
        raise ConfigurationError(
            "RegionStore needs one server or a Sentinel primary per region; "
            "a Redis Cluster per region is not built"
        )
    client = sync_client(url, timeout, options)
    assert isinstance(client, redis.Redis)  # not a cluster URL, checked above
    return client


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(fields: Mapping[Any, Any]) -> list[Entry]:
    """A window hash as (window, region, count) entries; an empty hash has none."""
    decoded = {_text(name): int(count) for name, count in fields.items()}
    window = decoded.get("w")
    if window is None:
        return []
    return [(window, name[2:], count) for name, count in decoded.items() if name.startswith("c:")]


class RegionStore(FromUrl):
    """A region's Redis for ``ReconciledBudget`` and ``DemandExchange``: see the module.

    ``clock`` is for tests: without one, windows follow this Redis's ``TIME``.
    ``timeout`` bounds the rate caps' calls; the client's ``socket_timeout``
    bounds the budget script and the exchange. The client stays the caller's
    (``close`` leaves it open) unless ``from_url`` made it: from a ``redis://``,
    ``rediss://``, ``unix://`` or ``redis+sentinel://`` URL, with ``timeout`` as its
    socket timeout too.
    """

    _connect = staticmethod(_region_client)

    def __init__(
        self,
        client: redis.Redis,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not isinstance(client, redis.Redis):
            raise ConfigurationError(
                f"RegionStore needs a redis.Redis client (a standalone server or a Sentinel "
                f"primary), not {type(client).__name__}; a Redis Cluster per region is not built"
            )
        self.prefix = check_prefix(prefix)
        self.client = client
        #: The regions' rate caps (what ``hit`` decides), apart from the application's keys.
        self.rates = RedisStore(
            client, clock=clock, prefix=f"{prefix}:region-rate", timeout=timeout
        )
        self.clock = self.rates.clock
        self.timeout = self.rates.timeout
        self._injected = clock is not None
        connection = client.connection_pool.connection_kwargs
        self.where = describe(connection)
        self._socket_timeout = float(connection.get("socket_timeout") or 0)
        # script name -> redis-py's Script, which reloads it after a SCRIPT FLUSH
        self._scripts: dict[str, Any] = {}
        self._owns_client = False

    # -- a Store, for the limiter of the rate caps ----------------------------------------

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """A rate cap's decision: ``RedisStore.hit`` under ``<prefix>:region-rate``."""
        return self.rates.hit(algorithm, key, rates, cost)

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget a rate cap's state (``RedisStore.reset``)."""
        self.rates.reset(algorithm, key, rates)

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """``RedisStore.acquire_slot`` under the rate caps' prefix (the Store protocol's)."""
        return self.rates.acquire_slot(key, limit, lease_id, slots, ttl_us)

    def release_slot(self, key: str, lease_id: str) -> bool:
        """``RedisStore.release_slot`` under the rate caps' prefix."""
        return self.rates.release_slot(key, lease_id)

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """``RedisStore.renew_slot`` under the rate caps' prefix."""
        return self.rates.renew_slot(key, lease_id, ttl_us)

    def ping(self) -> bool:
        """True when the server answers within ``timeout``."""
        return self.rates.ping()

    def close(self) -> None:
        """Close the store's connections (and the client, if ``from_url`` made it)."""
        self.rates.close()
        if self._owns_client:
            self.client.close()

    # -- the budget's script ---------------------------------------------------------------

    def budget_key(self, member: str) -> str:
        """The window hash of ``member`` (``<limit>:<period_us>:<key>``)."""
        limit, period_us, key = member.split(":", 2)
        return f"{self.prefix}:{{{escape(key)}}}:region:{limit}:{period_us}"

    def budget_hit(self, member: str, region: str, cost: int, default_cap: int) -> Op:
        """Admit ``cost`` for ``region`` iff its count stays within its cap; the reply is
        ``[allowed, own count, cap, microseconds until the window ends]``."""
        period_us = int(member.split(":", 2)[1])
        args = ("", "hit", period_us, region, cost, default_cap)
        return Op(_SCRIPT, (self.budget_key(member),), args, _redis_only)

    def budget_merge(
        self,
        member: str,
        region: str,
        share: tuple[int, int],
        recompute: bool,
        entries: Sequence[Entry],
    ) -> Op:
        """Merge the peers' ``entries`` (max per region, this window's only) and, if
        ``recompute``, set the cap to own + ``share`` of what is left of the limit; the
        reply is ``[window, merged total, own count, cap or -1]``."""
        limit, period_us, _ = member.split(":", 2)
        args: list[int | str] = ["", "merge", int(period_us), region, int(limit), *share]
        args.append("1" if recompute else "0")
        for entry in entries:
            args.extend(entry)
        return Op(_SCRIPT, (self.budget_key(member),), tuple(args), _redis_only)

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` as one script on the client (``ARGV[1]``: the clock's now, or "")."""
        with self._boundary():
            reply = self._registered(op)(keys=list(op.keys), args=self._args(op))
        return [int(value) for value in reply]

    def apply_all(self, ops: Sequence[Op]) -> list[list[int]]:
        """Run every op in one pipelined round trip: each atomic, not all together."""
        with self._boundary():
            pipe = self.client.pipeline(transaction=False)
            for op in ops:
                self._registered(op)(keys=list(op.keys), args=self._args(op), client=pipe)
            replies = pipe.execute()
        return [[int(value) for value in reply] for reply in replies]

    def _registered(self, op: Op) -> Any:
        found = self._scripts.get(op.script)
        if found is None:
            found = self._scripts[op.script] = self.client.register_script(script(op.script).source)
        return found

    def _args(self, op: Op) -> list[int | str]:
        args = list(op.args)
        args[0] = self.clock.now_us() if self._injected else ""
        return args

    # -- the exchange ------------------------------------------------------------------------

    def publish_active(self, region: str, members: Mapping[str, int], now_us: int) -> None:
        """Add ``members`` (member -> until, us) to ``region``'s active set, and drop the
        members whose time has passed at ``now_us``."""
        key = self._active_key(region)
        with self._boundary():
            pipe = self.client.pipeline(transaction=False)
            pipe.zremrangebyscore(key, "-inf", now_us)
            if members:
                pipe.zadd(key, dict(members))
                ttl_ms = max(1, (max(members.values()) - now_us) // 1_000)
                if self._injected:
                    # Redis counts the TTL in real time, which may run ahead of an
                    # injected clock; the scores say what is live (as in the scripts).
                    ttl_ms = max(ttl_ms, _INJECTED_TTL_FLOOR_MS)
                pipe.pexpire(key, ttl_ms)
            pipe.execute()

    def active(self, region: str, now_us: int, limit: int) -> list[str]:
        """The members of ``region``'s active set still live at ``now_us``, at most ``limit``."""
        with self._boundary():
            raw: list[Any] = self.client.zrangebyscore(
                self._active_key(region), now_us, "+inf", start=0, num=limit
            )
        return [_text(member) for member in raw]

    def read_counts(self, members: Sequence[str]) -> list[list[Entry]]:
        """Each member's window hash as (window, region, count) entries, in one round trip."""
        with self._boundary():
            pipe = self.client.pipeline(transaction=False)
            for member in members:
                pipe.hgetall(self.budget_key(member))
            replies = pipe.execute()
        return [_entries(fields) for fields in replies]

    def publish_demand(self, region: str, interval: int, demand: int) -> None:
        """Record ``region``'s demand of interval number ``interval`` (kept a few intervals)."""
        key = self._demand_key(region)
        with self._boundary():
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key, str(interval), demand)
            pipe.hdel(key, str(interval - _DEMAND_INTERVALS))
            pipe.expire(key, _DEMAND_TTL_S)
            pipe.execute()

    def demand(self, region: str, interval: int) -> int | None:
        """``region``'s demand of interval number ``interval``; None if it published none."""
        with self._boundary():
            raw = self.client.hget(self._demand_key(region), str(interval))
        return None if raw is None else int(raw)

    @contextmanager
    def _boundary(self) -> Iterator[None]:
        """The one error boundary of the script and the exchange: a Redis error met inside
        comes out as ``StorageUnavailableError`` (or ``StorageError``)."""
        try:
            yield
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self.where, self._socket_timeout)

    def _active_key(self, region: str) -> str:
        return f"{self.prefix}:regions:active:{region}"

    def _demand_key(self, region: str) -> str:
        return f"{self.prefix}:regions:demand:{region}"

    def __repr__(self) -> str:
        clock = "" if not self._injected else f", clock={self.clock!r}"
        return f"RegionStore({self.where!r}, prefix={self.prefix!r}, timeout={self.timeout}{clock})"
