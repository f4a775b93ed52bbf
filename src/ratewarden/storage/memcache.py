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

Several servers share the items by rendezvous hashing; a breaker kept per node
(``ratewarden serve``'s) has a circuit per server (``node_of``). Memcached 1.6 or
later (the meta protocol).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from ratewarden import checks
from ratewarden.algorithms import concurrency, layered
from ratewarden.clock import Clock, SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _plan
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix, escape
from ratewarden.storage._memcache_items import (
    Cache,
    Item,
    Step,
    injected_ttl_word,
    item_of,
    transact,
    ttl_word,
)
from ratewarden.storage._memcache_link import (
    DEFAULT_PORT,
    Address,
    AsyncLink,
    BlockingLink,
    Servers,
    check_addresses,
    failure,
    parse_url,
)
from ratewarden.storage._ops import Op

__all__ = ["DEFAULT_PORT", "AsyncMemcacheStore", "MemcacheStore", "parse_url"]

#: The store's default timeout, as the Redis store's: an outage costs a call 20 ms.
DEFAULT_TIMEOUT = 0.02
#: Items whose last value this process remembers (a write then needs no read first).
DEFAULT_CACHE_ITEMS = 10_000
#: memcached's own default largest item (``-I 1m``).
DEFAULT_MAX_ITEM_BYTES = 1024 * 1024

_STRIPES = 64

R = TypeVar("R")
Flow = Generator[bytes, wire.Reply, R]


class _MemcacheBase:
    """Settings, naming and every operation as a flow (``_memcache_items.transact``)."""

    def __init__(
        self,
        servers: str | Sequence[Address],
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        cache_items: int = DEFAULT_CACHE_ITEMS,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    ) -> None:
        addresses = (
            parse_url(servers)
            if isinstance(servers, str)
            else check_addresses(servers if isinstance(servers, list | tuple) else [servers])
        )
        if not checks.is_number(timeout, low_ok=False):
            raise ConfigurationError(
                f"memcache store timeout {timeout!r} must be a positive number of seconds "
                "(0.02 is 20 ms); a store never waits without a bound"
            )
        if isinstance(cache_items, bool) or not isinstance(cache_items, int) or cache_items < 0:
            raise ConfigurationError(f"cache_items {cache_items!r} must be a whole number >= 0")
        if not checks.is_number(max_item_bytes, 1024) or not isinstance(max_item_bytes, int):
            raise ConfigurationError(
                f"max_item_bytes {max_item_bytes!r} must be the servers' largest item (their -I, "
                "1 MB unless set): a whole number, 1024 or more"
            )
        self.prefix = check_prefix(prefix)
        self.timeout = float(timeout)
        self.max_item_bytes = max_item_bytes
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._ttl_word = ttl_word if isinstance(self.clock, SystemClock) else injected_ttl_word
        self.servers = Servers(addresses)
        self._cache = Cache(cache_items)
        self._shapes = _plan.Shapes()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Any:
        """A store on the servers ``memcache://HOST:PORT,...`` names (the same options)."""
        return cls(parse_url(url), **options)

    # -- naming

    def _head(self, key: str) -> str:
        return f"{self.prefix}:{{{escape(key)}}}"

    def node_of(
        self, key: str, *, stored: bool = False, rates: Rate | Sequence[Rate] | None = None
    ) -> str:
        """The server that holds ``key`` (a store key with ``stored``), as ``host:port``, for
        a breaker kept per node; ``""`` with one server (one circuit)."""
        if len(self.servers.addresses) == 1:
            return ""
        name = item_of([key if stored else self._head(checks.check_key(key)) + ":"]).wire
        return self.servers.names[self.servers.of(name)]

    # -- the operations, as flows on one item

    def _flow(self, item: Item, step: Step[R]) -> tuple[Item, Flow[R]]:
        return item, transact(
            item, step, self.clock.now_us, self._ttl_word, self._cache, self.max_item_bytes
        )

    def _hit_flow(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> tuple[Item, Flow[Decision]]:
        shape = self._shapes.get(algorithm, rates, cost)
        item = item_of(shape.keys(self.prefix, checks.check_key(key)))

        def step(states: list[Any], now: int) -> tuple[Decision, list[tuple[int, Any, int]]]:
            outcomes, writes = layered(shape.check, shape.params, states, now, shape.cost)
            if shape.single:
                decision = _decisions.single(shape.rates[0], outcomes[0], shape.cost)
            else:
                decision = _decisions.to_decision(shape.rates, outcomes, shape.cost)
            if writes is None:
                return decision, []
            return decision, [(i, state, now + ttl) for i, (state, ttl) in enumerate(writes)]

        return self._flow(item, step)

    def _reset_flow(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate]
    ) -> tuple[Item, Flow[None]]:
        shape = self._shapes.get(algorithm, rates, 0)
        item = item_of(shape.keys(self.prefix, checks.check_key(key)))

        def step(states: list[Any], now: int) -> tuple[None, list[tuple[int, Any, int]]]:
            return None, [(i, None, 0) for i, state in enumerate(states) if state is not None]

        return self._flow(item, step)

    def _acquire_flow(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> tuple[Item, Flow[Decision]]:
        checks.check_slot_request(limit, slots, ttl_us, lease_id)
        item = item_of([_plan.slot_key(self.prefix, key)])

        def step(states: list[Any], now: int) -> tuple[Decision, list[tuple[int, Any, int]]]:
            outcome, state, ttl = concurrency.acquire(
                states[0], now, limit, lease_id, slots, ttl_us
            )
            decision = _decisions.slot_decision(limit, slots, outcome)
            return decision, [(0, state, now + ttl)] if outcome.allowed else []

        return self._flow(item, step)

    def _release_flow(self, key: str, lease_id: str) -> tuple[Item, Flow[bool]]:
        item = item_of([_plan.slot_key(self.prefix, key)])
        lease_id = checks.check_lease_id(lease_id)

        def step(states: list[Any], now: int) -> tuple[bool, list[tuple[int, Any, int]]]:
            held, state, ttl = concurrency.release(states[0], now, lease_id)
            return held, [(0, state, now + ttl)] if held else []

        return self._flow(item, step)

    def _renew_flow(self, key: str, lease_id: str, ttl_us: int) -> tuple[Item, Flow[bool]]:
        item = item_of([_plan.slot_key(self.prefix, key)])
        checks.check_slot_request(1, 1, ttl_us, lease_id)

        def step(states: list[Any], now: int) -> tuple[bool, list[tuple[int, Any, int]]]:
            held, state, ttl = concurrency.renew(states[0], now, lease_id, ttl_us)
            return held, [(0, state, now + ttl)] if held else []

        return self._flow(item, step)

    def _apply_flow(self, op: Op) -> tuple[Item, Flow[list[int]]]:
        if not isinstance(op, Op):
            raise ConfigurationError(f"op {op!r} is not a ratewarden.storage.Op")
        item = item_of(op.keys)

        def step(states: list[Any], now: int) -> tuple[list[int], Sequence[Any]]:
            return op.step(op.args, states, now)

        return self._flow(item, step)

    def __repr__(self) -> str:
        servers = ",".join(self.servers.names)
        return f"{type(self).__name__}('memcache://{servers}', timeout={self.timeout:g})"


class MemcacheStore(_MemcacheBase):
    """A blocking store on memcached, safe to share between threads. See the module."""

    def __init__(self, servers: str | Sequence[Address], **options: Any) -> None:
        super().__init__(servers, **options)
        self._link = BlockingLink(self.servers, self.timeout, self._cache.clear)
        # One step at a time per item in this process (64 stripes of items), so that its
        # own threads do not beat each other's writes. A thread waits the timeout at most
        # for its turn: behind a hung server, the steps before it take a timeout each.
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]

    def _run(self, planned: tuple[Item, Flow[R]]) -> R:
        item, flow = planned
        server = self.servers.of(item.wire)
        stripe = self._stripes[hash(item.wire) % _STRIPES]
        if not stripe.acquire(timeout=self.timeout):
            raise failure(
                self.servers.names[server],
                f"the calls before this one on its item took the timeout ({self.timeout:g} s)",
            )
        try:
            # The connection first: opening one forgets the cached values the step may use.
            conn = self._link.take(server)
            try:
                request = next(flow)
                while True:
                    reply = self._link.exchange(server, conn, request)
                    try:
                        request = flow.send(reply)
                    except StopIteration as done:
                        result: R = done.value
                        return result
            finally:
                self._link.give(server, conn)
        finally:
            stripe.release()

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow; see ``Limiter.hit``."""
        return self._run(self._hit_flow(algorithm, key, rates, cost))

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget the state of ``key`` under these rates."""
        self._run(self._reset_flow(algorithm, key, rates))

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """Hold ``slots`` of ``limit`` concurrent slots on ``key`` for ``ttl_us`` (a lease)."""
        return self._run(self._acquire_flow(key, limit, lease_id, slots, ttl_us))

    def release_slot(self, key: str, lease_id: str) -> bool:
        """Give the lease's slots back; False if it was not held."""
        return self._run(self._release_flow(key, lease_id))

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """Extend a held lease to ``ttl_us`` from now; False if it was not held."""
        return self._run(self._renew_flow(key, lease_id, ttl_us))

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` (token budgets, fair shares) atomically on its keys' item."""
        return self._run(self._apply_flow(op))

    def ping(self) -> bool:
        """True when every server answers within the timeout, False when one does not."""
        for server in range(len(self.servers.addresses)):
            try:
                reply = self._link.call(server, wire.VERSION)
            except StorageError:
                return False
            if reply.code != b"VERSION":
                return False
        return True

    def close(self) -> None:
        """Close the store's connections."""
        self._link.close()


class AsyncMemcacheStore(_MemcacheBase):
    """The asyncio twin of ``MemcacheStore``: the same flows, awaited, on the running loop."""

    def __init__(self, servers: str | Sequence[Address], **options: Any) -> None:
        super().__init__(servers, **options)
        self._link = AsyncLink(self.servers, self.timeout, self._cache.clear)
        # Items with a step running in this process: the steps waiting for their turn.
        self._busy: dict[bytes, deque[asyncio.Future[None]]] = {}

    async def _run(self, planned: tuple[Item, Flow[R]]) -> R:
        item, flow = planned
        name = item.wire
        waiting = self._busy.get(name)
        if waiting is None:
            self._busy[name] = deque()
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiting.append(turn)
            try:
                await turn  # raises the failure of the step before, when it failed
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled() and turn.exception() is None:
                    self._pass(name)  # handed the turn, then cancelled: hand it on
                raise
        failed: StorageUnavailableError | None = None
        try:
            server = self.servers.of(name)
            # The connection first: opening one forgets the cached values the step may use.
            conn = await self._link.connection(server)
            request = next(flow)
            while True:
                reply = await self._link.call(conn, request)
                try:
                    request = flow.send(reply)
                except StopIteration as done:
                    result: R = done.value
                    return result
        except StorageUnavailableError as exc:
            failed = exc
            raise
        finally:
            self._pass(name, failed)

    def _pass(self, name: bytes, failed: StorageUnavailableError | None = None) -> None:
        """The next waiting step's turn on the item; or, after an outage, the same failure
        for every step waiting (each would wait its own timeout, one after the other)."""
        waiting = self._busy[name]
        while waiting:
            turn = waiting.popleft()
            if turn.done():
                continue
            if failed is None:
                turn.set_result(None)
                return
            turn.set_exception(StorageUnavailableError(str(failed)))
            turn.exception()  # retrieved: a cancelled waiter leaves no warning
        del self._busy[name]

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """See ``MemcacheStore.hit``."""
        return await self._run(self._hit_flow(algorithm, key, rates, cost))

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``MemcacheStore.reset``."""
        await self._run(self._reset_flow(algorithm, key, rates))

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """See ``MemcacheStore.acquire_slot``."""
        return await self._run(self._acquire_flow(key, limit, lease_id, slots, ttl_us))

    async def release_slot(self, key: str, lease_id: str) -> bool:
        """See ``MemcacheStore.release_slot``."""
        return await self._run(self._release_flow(key, lease_id))

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """See ``MemcacheStore.renew_slot``."""
        return await self._run(self._renew_flow(key, lease_id, ttl_us))

    async def apply(self, op: Op) -> list[int]:
        """See ``MemcacheStore.apply``."""
        return await self._run(self._apply_flow(op))

    async def ping(self) -> bool:
        """See ``MemcacheStore.ping``."""
        for server in range(len(self.servers.addresses)):
            try:
                reply = await self._link.call(await self._link.connection(server), wire.VERSION)
            except StorageError:
                return False
            if reply.code != b"VERSION":
                return False
        return True

    async def aclose(self) -> None:
        """Close the store's connections."""
        self._link.close()
