"""RegionStore / AsyncRegionStore: one region's Redis as the multi-region budgets use it.

Make one per region, on that region's ``redis.Redis`` client (a standalone
server or a Sentinel primary) or ``redis.RedisCluster`` client (a Cluster), and
hand them to ``ReconciledBudget`` (this region's and every peer's) or to
``DemandExchange`` (``ratewarden.regions``)::

    local = RegionStore(redis.Redis(host="redis.eu.internal", socket_timeout=0.05))
    peer = RegionStore(redis.RedisCluster(host="redis.us.internal", socket_timeout=0.5))

``AsyncRegionStore`` is its asyncio twin, on a ``redis.asyncio`` client,
for ``AsyncReconciledBudget`` and ``AsyncDemandExchange``: the same keys, the
same scripts and the same calls, awaited. Both are ``RegionBase``
(``_region_base.py``) but for the waiting.

It is three things:

- a ``Store`` (``AsyncStore``) for the limiter of the regions' rate caps: ``hit``
  runs on a ``RedisStore`` (``AsyncRedisStore``) under ``<prefix>:region-rate``
  (apart from the application's own limits on the same Redis), each call
  bounded by ``timeout``;
- ``apply(op)`` for the reconciled budget's script (``lua/region_budget.lua``),
  whose ``Op``s ``budget_hit`` and ``budget_merge`` build; the budget runs them
  through its limiter (``apply_flow``), or several in one round trip with
  ``apply_all`` (a sync round's merge), which answers each op as
  ``RedisStore.apply_all`` does (its reply, or the error standing for it);
- the exchange: pipelined writes and reads of the active-key sets and window
  hashes (sync rounds) and of the demand counts (``DemandExchange``).

The script and the exchange run on the caller's client, so they wait as long
as its ``socket_timeout`` lets them: give it one. Every Redis error becomes
``StorageUnavailableError`` (or ``StorageError``) here, at the one boundary, and a
reply of a shape Redis does not send (a server that speaks its protocol without
being Redis: a proxy, another RESP service, a wrong port) ``StorageError``.

Key schema (``prefix`` is ``rw`` by default; every region must use the same):

- ``<prefix>:{<escaped key>}:region:<limit>:<period_us>``: the window hash of one
  (key, global rate), see ``lua/region_budget.lua``;
- ``<prefix>:regions:active:<region>``: a sorted set of the members a region
  used, each scored by the time (us) until which peers should sync it;
- ``<prefix>:regions:demand:<region>``: a hash, interval number -> the demand a
  region counted in that interval, and ``t:<interval number>`` -> the weights a
  ``RegionalQuota`` took for that interval (``publish_taken``).

A *member*, ``<limit>:<period_us>:<key>``, names one (global rate, key) in the exchange.

The names are the same on a Cluster. The script touches one key, so one slot;
a hit's two keys (its rate cap's and its window hash) share the caller's key as
their hash tag, so one decision runs on one primary and reads one clock. The
exchange's reads over many keys (``read_counts``) and a round's merges
(``apply_all``) are Cluster pipelines: split by slot, one pipeline per primary,
the replies in the caller's order. A script a primary lacks (NOSCRIPT: nothing ran)
is sent again with its source, to that primary alone; a ``SCRIPT LOAD`` (redis-py's
``Script``) goes to every primary, so one primary down would fail the healthy ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio as aredis
from redis.exceptions import NoScriptError

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage._keys import DEFAULT_PREFIX
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_clients import async_client, sync_client
from ratewarden.storage._redis_store import DEFAULT_TIMEOUT
from ratewarden.storage._region_base import Batch, Entry, RegionBase, unanswered, unloaded
from ratewarden.storage._region_plan import PeerRound
from ratewarden.storage._region_replies import UNREADABLE, ints
from ratewarden.storage.redis import AsyncRedisStore, RedisStore

__all__ = ["AsyncRegionStore", "RegionStore"]

T = TypeVar("T")


class RegionStore(RegionBase):
    """A region's Redis for ``ReconciledBudget`` and ``DemandExchange``: see the module.

    ``clock`` is for tests: without one, windows follow this Redis's ``TIME``.
    ``timeout`` bounds the rate caps' calls; the client's ``socket_timeout``
    bounds the budget script and the exchange. The client stays the caller's
    (``close`` leaves it open) unless ``from_url`` made it: from a ``redis://``,
    ``rediss://``, ``unix://``, ``redis+sentinel://`` or ``redis+cluster://`` URL,
    with ``timeout`` as its socket timeout too.
    """

    _CLIENTS = (redis.Redis, redis.RedisCluster)
    _WRONG_CLIENT = (
        "RegionStore needs a redis.Redis client (a standalone server or a Sentinel "
        "primary) or a redis.RedisCluster client, not {}"
    )
    _RATES = RedisStore
    _connect = staticmethod(sync_client)
    client: redis.Redis | redis.RedisCluster
    rates: RedisStore

    @keywords_checked
    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(client, clock=clock, prefix=prefix, timeout=timeout)

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

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` as one script on the client (``ARGV[1]``: the clock's now, or "")."""
        with self._boundary():
            found, sent = self._registered(op), (*op.keys, *self._args(op))
            try:
                try:
                    reply = self.client.evalsha(found.sha, len(op.keys), *sent)
                except NoScriptError:  # nothing ran: sent to the key's server (primary) alone
                    reply = self.client.eval(found.script, len(op.keys), *sent)
            except UNREADABLE as exc:
                raise self.unreadable(exc) from exc
        try:  # costs nothing unless raised
            return ints(reply)
        except UNREADABLE as exc:
            raise self.wrong(reply, exc) from exc

    def apply_all(self, ops: Sequence[Op]) -> list[list[int] | Exception]:
        """Run every op as ``apply`` runs it, in order, in one pipelined round trip (on a
        Cluster, one per primary): each atomic, not all together. Each op's reply, or the
        ``StorageError`` ``apply`` would raise for its error reply (a script error answers
        its op only), as ``RedisStore.apply_all`` answers. Ops a primary had no script for
        (nothing ran) are sent again with its source (see the module). Raises
        ``StorageUnavailableError`` when the server, or a Cluster primary holding an op,
        cannot be reached or does not answer within the client's socket timeout."""
        with self._boundary():
            replies = self._scripts_pipeline(ops)
            again = unloaded(replies)
            if again:
                resent = self._scripts_pipeline([ops[i] for i in again], source=True)
                for i, reply in zip(again, resent, strict=True):
                    replies[i] = reply
            unanswered(replies)
        return self._answers(replies)

    def _scripts_pipeline(self, ops: Sequence[Op], source: bool = False) -> list[Any]:
        """Each op's script in one pipeline: by its SHA1, or with ``source`` as EVAL."""
        pipe = self._scripts_pipe(ops, source)
        with self.reading():
            return list(pipe.execute(raise_on_error=False))

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
        self._send(self._publish_active_batch(region, members, now_us, regions))

    def active(self, region: str, now_us: int, limit: int) -> list[str]:
        """The members of ``region``'s active set still live at ``now_us``, at most ``limit``."""
        return self._send(self._active_batch(region, now_us, limit))

    def read_counts(self, members: Sequence[str]) -> list[list[Entry]]:
        """Each member's window hash as (window, region, count) entries, in one round trip."""
        return self._send(self._read_counts_batch(members))

    def finish_round(self, region: str, at_us: int) -> None:
        """Record that ``region`` completed a round at ``at_us`` (on its clock)."""
        self._send(self._finish_round_batch(region, at_us))

    def read_round(self, region: str, members: Sequence[str]) -> PeerRound:
        """``region``'s last complete round, the regions it runs with, and each member's
        entries and (window, cap), in one round trip: what a peer's round reads of this store."""
        return self._send(self._read_round_batch(region, members))

    def publish_demand(self, region: str, interval: int, demand: int) -> None:
        """Add to ``region``'s demand of interval number ``interval`` (kept a few intervals):
        each process of the region adds what it counted."""
        self._send(self._publish_demand_batch(region, interval, demand))

    def demand(self, region: str, interval: int) -> int | None:
        """``region``'s demand of interval number ``interval``; None if it published none."""
        return self._send(self._demand_batch(region, interval))

    def publish_taken(self, region: str, interval: int, taken: str) -> None:
        """Record the weights ``region`` took for interval number ``interval`` (as text)."""
        self._send(self._publish_taken_batch(region, interval, taken))

    def demand_and_taken(
        self, region: str, interval: int, taken_interval: int
    ) -> tuple[int | None, str | None]:
        """``region``'s demand of ``interval`` and the weights it took for ``taken_interval``,
        in one command; None for either it did not publish."""
        return self._send(self._demand_and_taken_batch(region, interval, taken_interval))

    def _send(self, batch: Batch[T]) -> T:
        with self._boundary():
            pipe = self._pipeline(batch)
            with self.reading(batch.what):
                replies = pipe.execute()
        return self.read(batch.read, replies, batch.what)


class AsyncRegionStore(RegionBase):
    """The asyncio twin of ``RegionStore``, on a ``redis.asyncio.Redis`` or
    ``redis.asyncio.RedisCluster`` client: the same options, keys and calls, awaited
    (``aclose`` for ``close``)."""

    _CLIENTS = (aredis.Redis, aredis.RedisCluster)
    _WRONG_CLIENT = (
        "AsyncRegionStore needs a redis.asyncio.Redis client (a standalone server or a "
        "Sentinel primary) or a redis.asyncio.RedisCluster client, not {}; blocking "
        "clients go to RegionStore"
    )
    _RATES = AsyncRedisStore
    _connect = staticmethod(async_client)
    client: aredis.Redis | aredis.RedisCluster
    rates: AsyncRedisStore

    @keywords_checked
    def __init__(
        self,
        client: aredis.Redis | aredis.RedisCluster,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(client, clock=clock, prefix=prefix, timeout=timeout)

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """See ``RegionStore.hit``."""
        return await self.rates.hit(algorithm, key, rates, cost)

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``RegionStore.reset``."""
        await self.rates.reset(algorithm, key, rates)

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """See ``RegionStore.acquire_slot``."""
        return await self.rates.acquire_slot(key, limit, lease_id, slots, ttl_us)

    async def release_slot(self, key: str, lease_id: str) -> bool:
        """See ``RegionStore.release_slot``."""
        return await self.rates.release_slot(key, lease_id)

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """See ``RegionStore.renew_slot``."""
        return await self.rates.renew_slot(key, lease_id, ttl_us)

    async def ping(self) -> bool:
        """See ``RegionStore.ping``."""
        return await self.rates.ping()

    async def aclose(self) -> None:
        """Close the store's connections (and the client, if ``from_url`` made it)."""
        await self.rates.aclose()
        if self._owns_client:
            await self.client.aclose()

    async def apply(self, op: Op) -> list[int]:
        """See ``RegionStore.apply``."""
        with self._boundary():
            found, sent = self._registered(op), (*op.keys, *self._args(op))
            try:
                try:
                    reply = await self.client.evalsha(found.sha, len(op.keys), *sent)
                except NoScriptError:
                    reply = await self.client.eval(found.script, len(op.keys), *sent)
            except UNREADABLE as exc:
                raise self.unreadable(exc) from exc
        try:  # costs nothing unless raised
            return ints(reply)
        except UNREADABLE as exc:
            raise self.wrong(reply, exc) from exc

    async def apply_all(self, ops: Sequence[Op]) -> list[list[int] | Exception]:
        """See ``RegionStore.apply_all``."""
        with self._boundary():
            replies = await self._scripts_pipeline(ops)
            again = unloaded(replies)
            if again:
                resent = await self._scripts_pipeline([ops[i] for i in again], source=True)
                for i, reply in zip(again, resent, strict=True):
                    replies[i] = reply
            unanswered(replies)
        return self._answers(replies)

    async def _scripts_pipeline(self, ops: Sequence[Op], source: bool = False) -> list[Any]:
        pipe = self._scripts_pipe(ops, source)
        with self.reading():
            return list(await pipe.execute(raise_on_error=False))

    async def publish_active(
        self,
        region: str,
        members: Mapping[str, int],
        now_us: int,
        regions: Sequence[str] | None = None,
    ) -> None:
        """See ``RegionStore.publish_active``."""
        await self._send(self._publish_active_batch(region, members, now_us, regions))

    async def active(self, region: str, now_us: int, limit: int) -> list[str]:
        """See ``RegionStore.active``."""
        return await self._send(self._active_batch(region, now_us, limit))

    async def read_counts(self, members: Sequence[str]) -> list[list[Entry]]:
        """See ``RegionStore.read_counts``."""
        return await self._send(self._read_counts_batch(members))

    async def finish_round(self, region: str, at_us: int) -> None:
        """See ``RegionStore.finish_round``."""
        await self._send(self._finish_round_batch(region, at_us))

    async def read_round(self, region: str, members: Sequence[str]) -> PeerRound:
        """See ``RegionStore.read_round``."""
        return await self._send(self._read_round_batch(region, members))

    async def publish_demand(self, region: str, interval: int, demand: int) -> None:
        """See ``RegionStore.publish_demand``."""
        await self._send(self._publish_demand_batch(region, interval, demand))

    async def demand(self, region: str, interval: int) -> int | None:
        """See ``RegionStore.demand``."""
        return await self._send(self._demand_batch(region, interval))

    async def publish_taken(self, region: str, interval: int, taken: str) -> None:
        """See ``RegionStore.publish_taken``."""
        await self._send(self._publish_taken_batch(region, interval, taken))

    async def demand_and_taken(
        self, region: str, interval: int, taken_interval: int
    ) -> tuple[int | None, str | None]:
        """See ``RegionStore.demand_and_taken``."""
        return await self._send(self._demand_and_taken_batch(region, interval, taken_interval))

    async def _send(self, batch: Batch[T]) -> T:
        with self._boundary():
            pipe = self._pipeline(batch)
            with self.reading(batch.what):
                replies = await pipe.execute()
        return self.read(batch.read, replies, batch.what)
