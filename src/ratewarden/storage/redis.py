"""RedisStore / AsyncRedisStore: shared state in Redis or Valkey (standalone, Sentinel, Cluster).

Each decision is one atomic Lua script (the algorithm's twin in ``lua/``) on
one server: every layer's key carries the caller's key as its hash tag, so on a
Cluster the whole decision lands in one slot. Redis ``TIME`` is the clock
unless the store is given one (tests pass ``ManualClock``).

::

    store = RedisStore.from_url("redis://localhost:6379/0")
    store = RedisStore(redis.Redis(...))                  # or redis.RedisCluster(...),
                                                          # or Sentinel(...).master_for(...)
    store = AsyncRedisStore.from_url("redis+cluster://10.0.0.1:6379,10.0.0.2:6379")

URL forms are listed in ``ratewarden.storage._redis_url``: ``redis://``,
``rediss://``, ``unix://``, ``redis+sentinel://h1:26379,h2:26379/service[/db]``
and ``redis+cluster://h1:6379[,h2:6379]`` (``rediss+...`` for TLS).

Bounded in time: ``timeout`` (seconds, default 0.02) bounds each connect and
each reply on the store's own connections, whatever the client's socket
timeouts (on the pipelined asyncio store, counted from the reply's turn: see
``_redis_pipe``). A hit normally needs one round trip; after a script cache
flush, a Sentinel failover or a Cluster redirection it needs two or three, each
bounded the same way. When Redis cannot answer in time, ``hit`` raises
``StorageUnavailableError`` (never a silent allow) and the failure mode
decides; whether that decision was applied is then unknown, so nothing is
retried blindly. Clients built by ``from_url`` use the same timeout.

Speed: redis-py sets every connection up (pools of settings, TLS, AUTH,
Sentinel discovery, the Cluster slot table), and the store then drives the
socket itself: one ``EVALSHA`` per decision, packed from a template made once per
call shape (only the key and ``now`` are encoded per call), one ``poll`` for the
reply, parsed by hiredis, skipping redis-py's per-command overhead. The asyncio
store pipelines automatically: decisions made in one event-loop turn share one
write. See docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio as aredis

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _plan
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_async import AsyncCluster, AsyncRouter, AsyncStandalone
from ratewarden.storage._redis_clients import async_client, sync_client
from ratewarden.storage._redis_errors import (
    REDIS_ERRORS,
    raise_storage_error,
    read_reply,
    wrong_reply,
)
from ratewarden.storage._redis_link import DEFAULT_SPIN
from ratewarden.storage._redis_store import (
    DEFAULT_TIMEOUT,
    Call,
    RedisBase,
    check_spin,
    check_timeout,
)
from ratewarden.storage._redis_sync import Cluster, Router, Standalone

__all__ = ["DEFAULT_TIMEOUT", "AsyncRedisStore", "RedisStore"]

T = TypeVar("T")

#: What ``ping`` decides after PING: a peek (a hit of cost 0: the script reads the key and
#: writes nothing) on a key under the store's prefix, so that an ACL forbidding the store's
#: keys or scripts fails the ping as it would fail every call.
_PROBE = ("fixed_window", "ratewarden-ping", Rate(1, 1), 0)
#: Sent first when the scripts read Redis TIME (no clock given): its refusal names TIME,
#: where a script's refused ``redis.call('TIME')`` names only the script's line.
_TIME = ("{ratewarden-ping}", "TIME")


class RedisStore(RedisBase):
    """Thread- and fork-safe synchronous store over a ``redis.Redis`` or ``redis.RedisCluster``.

    The client stays the caller's (``close`` leaves it open) unless the store
    built it in ``from_url``. ``spin`` (seconds, default 100 us, 0 = off) is how
    long a thread polls for a reply before it sleeps until the reply arrives: a
    Redis on the same host usually answers within it, and the thread then skips
    the kernel's wake-up; a slower reply makes the connection stop spinning for
    a while (see ``_redis_link.Link``).
    """

    _ROUTERS = ((redis.RedisCluster, Cluster), (redis.Redis, Standalone))
    _WRONG_CLIENT = (
        "RedisStore needs a redis.Redis or redis.RedisCluster client, not {}; "
        "asyncio clients go to AsyncRedisStore"
    )
    _OWN_OPTIONS = ("spin",)
    _connect = staticmethod(sync_client)
    _router: Router
    client: redis.Redis | redis.RedisCluster
    #: The ``StorageUnavailableError`` the last ``ping`` met (it answered False), or None.
    last_ping_error: StorageUnavailableError | None = None

    @keywords_checked
    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        spin: float = DEFAULT_SPIN,
    ) -> None:
        # Checked in the order the base checks the rest, before the router needs it.
        check_prefix(prefix)
        self.spin = check_spin(spin, check_timeout(timeout))
        super().__init__(client, clock=clock, prefix=prefix, timeout=timeout)

    @classmethod
    def _check_own(cls, timeout: float, own: dict[str, Any]) -> None:
        check_spin(own.get("spin", DEFAULT_SPIN), timeout)

    def _router_options(self) -> tuple[Any, ...]:
        return (self.spin,)

    def _run(self, call: Call[T]) -> T:
        """Make ``call`` on the keys' server: NOSCRIPT, failover and redirection are handled
        on the way, and Redis errors come out as ``StorageError`` subclasses."""
        if not call.method:
            return call.read(None)
        try:
            reply = getattr(self._router, call.method)(*call.args)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return read_reply(call.read, reply, self._router.where)

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow, in one atomic script.

        Raises ``StorageUnavailableError`` when Redis does not answer in time.
        """
        # Not a Call: the hot path, with its request packed from the shape's template.
        shape, found, route_key, packed = self._request(algorithm, key, rates, cost)
        try:
            reply = self._router.eval(found, route_key, packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        try:  # free unless raised (Python 3.11): a reply of the wrong shape is the store's
            return _decisions.decode(shape.rates, shape.cost, reply)
        except _decisions.REPLY_ERRORS as exc:
            raise StorageError(wrong_reply(self._router.where, reply, exc)) from exc

    def hit_all(self, algorithm: str, calls: Sequence[_plan.BatchCall]) -> list[Decision] | None:
        """Decide several ``(key, rates, cost)`` calls in one atomic script; see
        ``MemoryStore.hit_all``.

        None when they cannot share one script: on a Cluster, keys that hash to
        different slots (nothing is sent then; decide them another way).
        """
        return self._run(self._hit_all_call(algorithm, calls))

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Delete the state of ``key`` under these rates."""
        self._run(self._reset_call(algorithm, key, rates))

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """Hold ``slots`` of ``limit`` concurrent slots on ``key`` for ``ttl_us`` (a lease)."""
        return self._run(self._acquire_call(key, limit, lease_id, slots, ttl_us))

    def release_slot(self, key: str, lease_id: str) -> bool:
        """Give the lease's slots back; False if it was not held (expired or never granted)."""
        return self._run(self._release_call(key, lease_id))

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """Extend a held lease to ``ttl_us`` from now; False if it was not held."""
        return self._run(self._renew_call(key, lease_id, ttl_us))

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` (token budgets, fair shares: ``ratewarden.storage.Op``) as one script."""
        return self._run(self._apply_call(op))

    def apply_all(self, ops: Sequence[Op]) -> list[list[int] | Exception]:
        """Run every op as ``apply`` runs it, in order, their scripts in one pipeline (on a
        Cluster one per primary of their slots, all written before any reply is read): each
        op atomic on its own, not all together. Each op's reply, or the ``StorageError``
        standing for it (a script error, or a Cluster primary that failed, answers only its
        ops). Raises ``StorageUnavailableError`` when the server does not answer in time;
        ``TypeError`` for what is not a sequence of Ops, before anything is sent."""
        calls = self._apply_all_calls(ops)
        if not calls:
            return []
        try:
            replies = self._router.eval_all([call.args for call in calls])
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return self._answers(calls, replies)

    def ping(self) -> bool:
        """True when the server (every Cluster primary) answers within the timeout and lets
        the store decide, False when one does not answer. It sends PING, then (without a
        clock) TIME, then a peek of cost 0 on a key under the store's prefix, which writes
        nothing. Raises ``StorageError`` when one answers but cannot be used: a Redis older
        than 6.2, refused credentials, or an ACL that forbids the store's keys, scripts or
        TIME (``NOPERM``), which would fail every call. Why the last ping answered False is
        kept in ``last_ping_error`` (None after one that answered True), for a health line
        to name the cause (a refused connection, a timeout, a name that does not resolve)."""
        try:
            try:
                self._router.ping()
                if self._now_us is None:
                    self._router.command(*_TIME)
            except REDIS_ERRORS as exc:  # an outage (False below) or a refusal (raised)
                raise_storage_error(exc, self._router.where, self.timeout)
            self.hit(*_PROBE)
        except StorageUnavailableError as exc:
            self.last_ping_error = exc
            return False
        self.last_ping_error = None
        return True

    def close(self) -> None:
        """Close the store's connections (and the client, if ``from_url`` made it)."""
        self._router.close()
        if self._owns_client:
            self.client.close()


class AsyncRedisStore(RedisBase):
    """The asyncio twin of ``RedisStore``, over ``redis.asyncio.Redis`` or ``RedisCluster``.

    Concurrent decisions share pipelined writes on one connection per server.
    """

    _ROUTERS = ((aredis.RedisCluster, AsyncCluster), (aredis.Redis, AsyncStandalone))
    _WRONG_CLIENT = (
        "AsyncRedisStore needs a redis.asyncio.Redis or redis.asyncio.RedisCluster "
        "client, not {}; blocking clients go to RedisStore"
    )
    _connect = staticmethod(async_client)
    _router: AsyncRouter
    client: aredis.Redis | aredis.RedisCluster
    #: The ``StorageUnavailableError`` the last ``ping`` met (it answered False), or None.
    last_ping_error: StorageUnavailableError | None = None

    async def _run(self, call: Call[T]) -> T:
        """See ``RedisStore._run``."""
        if not call.method:
            return call.read(None)
        try:
            reply = await getattr(self._router, call.method)(*call.args)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return read_reply(call.read, reply, self._router.where)

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """See ``RedisStore.hit``."""
        shape, found, route_key, packed = self._request(algorithm, key, rates, cost)
        try:
            reply = await self._router.eval(found, route_key, packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        try:
            return _decisions.decode(shape.rates, shape.cost, reply)
        except _decisions.REPLY_ERRORS as exc:
            raise StorageError(wrong_reply(self._router.where, reply, exc)) from exc

    async def hit_all(
        self, algorithm: str, calls: Sequence[_plan.BatchCall]
    ) -> list[Decision] | None:
        """See ``RedisStore.hit_all``."""
        return await self._run(self._hit_all_call(algorithm, calls))

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``RedisStore.reset``."""
        await self._run(self._reset_call(algorithm, key, rates))

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """See ``RedisStore.acquire_slot``."""
        return await self._run(self._acquire_call(key, limit, lease_id, slots, ttl_us))

    async def release_slot(self, key: str, lease_id: str) -> bool:
        """See ``RedisStore.release_slot``."""
        return await self._run(self._release_call(key, lease_id))

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """See ``RedisStore.renew_slot``."""
        return await self._run(self._renew_call(key, lease_id, ttl_us))

    async def apply(self, op: Op) -> list[int]:
        """See ``RedisStore.apply``."""
        return await self._run(self._apply_call(op))

    async def ping(self) -> bool:
        """See ``RedisStore.ping``."""
        try:
            try:
                await self._router.ping()
                if self._now_us is None:
                    await self._router.command(*_TIME)
            except REDIS_ERRORS as exc:  # an outage (False below) or a refusal (raised)
                raise_storage_error(exc, self._router.where, self.timeout)
            await self.hit(*_PROBE)
        except StorageUnavailableError as exc:
            self.last_ping_error = exc
            return False
        self.last_ping_error = None
        return True

    async def aclose(self) -> None:
        """Close the store's connections (and the client, if ``from_url`` made it)."""
        await self._router.aclose()
        if self._owns_client:
            await self.client.aclose()
