"""Counters in memcached: ``MemcacheStore`` and its asyncio twin ``AsyncMemcacheStore``.

For deployments that run memcached rather than Redis (envoyproxy/ratelimit's
``BACKEND_TYPE=memcache``). Every algorithm, layered limits, concurrency slots and
token budgets work, exactly and atomically, with any number of processes: the
states one atomic step touches live in one memcached item, and a step writes it
back with compare-and-set (``_memcache_items``). What memcached cannot give:

- **One step over several keys** (``hit_all``): not offered, so the Envoy service
  checks every descriptor, then charges them (two steps instead of one).
- **One clock.** Redis has ``TIME``; memcached has none, so decisions are made on
  this process's clock (``clock=``). Run NTP on every host that shares the servers.
- **Durability and failover.** An item lost with its server (a restart, an eviction
  under memory pressure) is a key seen afresh. Size the servers so nothing is evicted
  (``stats``'s ``evictions``).

Steps on one item take turns within a process. The asyncio store decides the
steps that queued up on an item while the last one ran together, in their order,
in one read and one write: a hot key costs a round trip per turn, not per call.

Several servers share the items by rendezvous hashing; a breaker kept per node
(``ratewarden serve``'s) has a circuit per server (``node_of``). A server is a TCP
``host:port`` or a Unix socket's path (``memcache:///run/mc.sock``, ``_memcache_url``).
Memcached 1.6 or later (the meta protocol).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, TypeVar

from ratewarden.decision import Decision
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_base import (
    DEFAULT_CACHE_ITEMS,
    DEFAULT_MAX_ITEM_BYTES,
    DEFAULT_TIMEOUT,
    MemcacheBase,
    Planned,
    check_options,
)
from ratewarden.storage._memcache_items import Failed, Item, LiveStep
from ratewarden.storage._memcache_link import BlockingLink, failure
from ratewarden.storage._memcache_pipe import AsyncLink
from ratewarden.storage._memcache_url import DEFAULT_PORT, Address, parse_url
from ratewarden.storage._ops import Op

__all__ = [
    "DEFAULT_CACHE_ITEMS",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT",
    "AsyncMemcacheStore",
    "MemcacheStore",
    "parse_url",
]

_STRIPES = 64

R = TypeVar("R")

#: A step waiting its turn on an item, and where its result goes.
_Waiting = tuple[LiveStep[Any], "asyncio.Future[Any]"]


def _result(found: Any) -> Any:
    if isinstance(found, Failed):
        raise found.error
    return found


class MemcacheStore(MemcacheBase):
    """A blocking store on memcached, safe to share between threads. See the module."""

    def __init__(self, servers: str | Sequence[Address], **options: Any) -> None:
        check_options(type(self).__name__, options)
        super().__init__(servers, **options)
        self._link = BlockingLink(self.timeout, self._forget, self.tls)
        # One step at a time per item in this process (64 stripes of items), so that its
        # own threads do not beat each other's writes. A thread waits the timeout at most
        # for its turn: behind a hung server, the steps before it take a timeout each.
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]

    def _run(self, planned: Planned[R]) -> R:
        item, step = planned
        stripe = self._stripes[hash(item.wire) % _STRIPES]
        if not stripe.acquire(timeout=self.timeout):
            servers = self.servers
            raise failure(
                servers.names[servers.of(item.wire)],
                f"the calls before this one on its item took the timeout ({self.timeout:g} s)",
            )
        try:
            # The connection first: opening one forgets the cached values the step may use.
            # (A new connection clears ``cache`` in place; a new server list makes another.)
            servers, cache = self._now()
            address = servers.addresses[servers.of(item.wire)]
            conn = self._link.take(address)
            try:
                flow = self._transact(item, [step], cache)
                request = next(flow)
                while True:
                    reply = self._link.exchange(conn, request)
                    try:
                        request = flow.send(reply)
                    except StopIteration as done:
                        result: R = _result(done.value[0])
                        return result
            finally:
                self._link.give(address, conn)
        finally:
            stripe.release()

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow; see ``Limiter.hit``."""
        return self._run(self._hit_step(algorithm, key, rates, cost))

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget the state of ``key`` under these rates."""
        self._run(self._reset_step(algorithm, key, rates))

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """Hold ``slots`` of ``limit`` concurrent slots on ``key`` for ``ttl_us`` (a lease)."""
        return self._run(self._acquire_step(key, limit, lease_id, slots, ttl_us))

    def release_slot(self, key: str, lease_id: str) -> bool:
        """Give the lease's slots back; False if it was not held."""
        return self._run(self._release_step(key, lease_id))

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """Extend a held lease to ``ttl_us`` from now; False if it was not held."""
        return self._run(self._renew_step(key, lease_id, ttl_us))

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` (token budgets, fair shares) atomically on its keys' item."""
        return self._run(self._apply_step(op))

    def ping(self) -> bool:
        """True when every server answers within the timeout, False when one does not."""
        for address in self.servers.addresses:
            try:
                reply = self._link.call(address, wire.VERSION)
            except StorageError:
                return False
            if reply.code != b"VERSION":
                return False
        return True

    def close(self) -> None:
        """Close the store's connections."""
        self._link.close()


class AsyncMemcacheStore(MemcacheBase):
    """The asyncio twin of ``MemcacheStore``: the same steps, awaited, on the running loop;
    the steps that queue up on an item while one runs are decided together after it."""

    def __init__(self, servers: str | Sequence[Address], **options: Any) -> None:
        check_options(type(self).__name__, options)
        super().__init__(servers, **options)
        self._link = AsyncLink(self.timeout, self._forget, self.tls)
        # Items with a step running in this process: the steps queued up behind it.
        self._queues: dict[bytes, list[_Waiting]] = {}
        self._drains: set[asyncio.Task[None]] = set()

    async def _run(self, planned: Planned[R]) -> R:
        item, step = planned
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        queue = self._queues.get(item.wire)
        if queue is not None:  # a step is running on the item: decided in the next turn
            queue.append((step, future))
            result: R = await future
            return result
        # The item's first step runs in the caller; the steps that queue up behind it
        # are decided together, turn after turn, by a task of their own.
        queue = self._queues[item.wire] = [(step, future)]
        try:
            await self._turn(item, queue)
        finally:
            if queue:
                drain = loop.create_task(self._drain(item, queue))
                self._drains.add(drain)
                drain.add_done_callback(self._drains.discard)
            else:
                del self._queues[item.wire]
        return _result(future.result())  # type: ignore[no-any-return]

    async def _drain(self, item: Item, queue: list[_Waiting]) -> None:
        try:
            while queue:
                await self._turn(item, queue)
        finally:
            if self._queues.get(item.wire) is queue:
                del self._queues[item.wire]

    async def _turn(self, item: Item, queue: list[_Waiting]) -> None:
        """Decide the steps queued on ``item`` (those not cancelled) in one ``transact``
        and hand each its result. Only a cancellation of this task escapes."""
        batch = [waiting for waiting in queue if not waiting[1].done()]
        queue.clear()
        if not batch:
            return
        try:
            # The connection first: opening one forgets the cached values the steps may use.
            servers, cache = self._now()
            conn = await self._link.connection(servers.addresses[servers.of(item.wire)])
            flow = self._transact(item, [step for step, _ in batch], cache)
            request = next(flow)
            while True:
                reply = await self._link.call(conn, request)
                try:
                    request = flow.send(reply)
                except StopIteration as done:
                    results: list[Any] = done.value
                    break
        except StorageUnavailableError as exc:
            # An outage: the steps queued behind would each wait out the timeout again.
            _fail(batch + queue, exc)
            queue.clear()
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), found in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(found, Failed):
                future.set_exception(found.error)
            else:
                future.set_result(found)

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """See ``MemcacheStore.hit``."""
        return await self._run(self._hit_step(algorithm, key, rates, cost))

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``MemcacheStore.reset``."""
        await self._run(self._reset_step(algorithm, key, rates))

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """See ``MemcacheStore.acquire_slot``."""
        return await self._run(self._acquire_step(key, limit, lease_id, slots, ttl_us))

    async def release_slot(self, key: str, lease_id: str) -> bool:
        """See ``MemcacheStore.release_slot``."""
        return await self._run(self._release_step(key, lease_id))

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """See ``MemcacheStore.renew_slot``."""
        return await self._run(self._renew_step(key, lease_id, ttl_us))

    async def apply(self, op: Op) -> list[int]:
        """See ``MemcacheStore.apply``."""
        return await self._run(self._apply_step(op))

    async def ping(self) -> bool:
        """See ``MemcacheStore.ping``."""
        for address in self.servers.addresses:
            try:
                reply = await self._link.call(await self._link.connection(address), wire.VERSION)
            except StorageError:
                return False
            if reply.code != b"VERSION":
                return False
        return True

    async def aclose(self) -> None:
        """Close the store's connections."""
        self._link.close()


def _fail(waiting: list[_Waiting], error: Exception) -> None:
    """Each waiting step's caller gets an error of its own (one object raised in many tasks
    would gather all their tracebacks)."""
    for _, future in waiting:
        if not future.done():
            copy = type(error)(str(error)) if isinstance(error, StorageError) else error
            future.set_exception(copy)
            future.exception()  # retrieved: a cancelled waiter leaves no warning
