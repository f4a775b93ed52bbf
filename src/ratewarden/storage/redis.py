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
``StorageUnavailableError`` (never a silent allow) and the failure policy
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

import math
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio as aredis
from redis.crc import key_slot

from ratewarden import checks
from ratewarden.clock import Clock, SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import _plan
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix, escape
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_async import AsyncCluster, AsyncRouter, AsyncStandalone
from ratewarden.storage._redis_clients import async_client, sync_client
from ratewarden.storage._redis_errors import REDIS_ERRORS, raise_storage_error
from ratewarden.storage._redis_link import DEFAULT_SPIN
from ratewarden.storage._redis_protocol import Sendable, Template, evalsha_command
from ratewarden.storage._redis_sync import Cluster, Router, Standalone
from ratewarden.storage._scripts import Script, script

__all__ = ["DEFAULT_TIMEOUT", "AsyncRedisStore", "RedisStore"]

#: Seconds a store waits for Redis per connect or reply before giving up.
DEFAULT_TIMEOUT = 0.02

#: Request templates a store keeps (one per call shape) before it starts again from empty.
_TEMPLATE_CACHE_SIZE = 1024


def _check_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(
            f"Redis store timeout {timeout!r} must be a positive number of seconds "
            "(0.02 is 20 ms); a store never waits without a bound"
        )
    return float(timeout)


class _RedisBase:
    """Everything but the I/O: settings, the clock, planning."""

    def __init__(self, *, clock: Clock | None, prefix: str, timeout: float) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        # Without a clock, ARGV[1] is "" and the script reads Redis TIME.
        self._now_us: Callable[[], int] | None = None if clock is None else clock.now_us
        self.prefix = check_prefix(prefix)
        self.timeout = _check_timeout(timeout)
        self._owns_client = False
        self._clustered = False  # a Cluster client: a hit_all needs its keys on one slot
        self._shapes = _plan.Shapes()
        # id(shape) -> (shape, its template); the shape is kept so that its id stays its own.
        self._templates: dict[int, tuple[_plan.Shape, Template]] = {}

    def _request(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> tuple[_plan.Shape, Script, str, bytes]:
        """Validate a call: its shape, script, a key routed like its keys, and its EVALSHA.

        Raises ``ConfigurationError`` on bad input, before anything is sent.
        """
        shape = self._shapes.get(algorithm, rates, cost)
        if type(key) is not str or not key or not key.isascii():
            checks.check_key(key)
        found = self._templates.get(id(shape))
        if found is None or found[0] is not shape:
            found = self._template(shape)
        template = found[1]
        tag = escape(key)
        now_us = self._now_us
        packed = template.pack(tag, None if now_us is None else now_us())
        return shape, template.script, "{" + tag + "}", packed

    def _batch(self, found: _plan.Batch) -> tuple[Script, str, bytes] | None:
        """The script, route key and EVALSHA of a validated ``hit_all``; None if split.

        On a Cluster, calls whose keys hash to different slots cannot share one
        script: None then, and nothing is sent.
        """
        if self._clustered and len({key_slot(escape(key).encode()) for key, _ in found}) > 1:
            return None
        keys = [state for key, shape in found for state in shape.keys(self.prefix, key)]
        found_script = script(found[0][1].name)
        packed = evalsha_command(found_script, keys, _plan.batch_argv(found, self._now()))
        return found_script, "{" + escape(found[0][0]) + "}", packed

    def _template(self, shape: _plan.Shape) -> tuple[_plan.Shape, Template]:
        args = [shape.cost, *(value for layer in shape.params for value in layer)]
        found = (shape, Template(script(shape.name), self.prefix, shape.suffixes, args))
        if len(self._templates) >= _TEMPLATE_CACHE_SIZE:
            self._templates.clear()
        self._templates[id(shape)] = found
        return found

    def _now(self) -> int | None:
        """ARGV[1] for a script: the clock's now, or None for "read Redis TIME"."""
        now_us = self._now_us
        return None if now_us is None else now_us()

    # Concurrency slots: one hash per key, updated by the concurrency script.

    def _op_args(self, op: Op) -> list[Sendable]:
        """An op's ARGV with ``ARGV[1]`` filled in: the clock's now, or "" for Redis TIME."""
        args: list[Sendable] = list(op.args)
        now = self._now()
        args[0] = "" if now is None else now
        return args

    def _acquire_call(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> tuple[list[str], list[int | str]]:
        checks.check_slot_request(limit, slots, ttl_us, lease_id)
        args = _plan.slot_argv(self._now(), "acquire", lease_id, limit, slots, ttl_us)
        return [_plan.slot_key(self.prefix, key)], args

    def _release_call(self, key: str, lease_id: str) -> tuple[list[str], list[int | str]]:
        lease_id = checks.check_lease_id(lease_id)
        return [_plan.slot_key(self.prefix, key)], _plan.slot_argv(self._now(), "release", lease_id)

    def _renew_call(
        self, key: str, lease_id: str, ttl_us: int
    ) -> tuple[list[str], list[int | str]]:
        checks.check_slot_request(1, 1, ttl_us, lease_id)
        args = _plan.slot_argv(self._now(), "renew", lease_id, ttl_us=ttl_us)
        return [_plan.slot_key(self.prefix, key)], args

    def _describe(self, where: str) -> str:
        clock = "" if self._now_us is None else f", clock={self.clock!r}"
        name = type(self).__name__
        return f"{name}({where!r}, prefix={self.prefix!r}, timeout={self.timeout}{clock})"


def _check_spin(spin: object, timeout: float) -> float:
    if (
        isinstance(spin, bool)
        or not isinstance(spin, int | float)
        or not math.isfinite(spin)
        or not 0 <= spin < timeout
    ):
        raise ConfigurationError(
            f"Redis store spin {spin!r} must be a number of seconds from 0 (never spin) up to "
            f"less than the timeout {timeout}; the default is {DEFAULT_SPIN} (100 us)"
        )
    return float(spin)


class RedisStore(_RedisBase):
    """Thread- and fork-safe synchronous store over a ``redis.Redis`` or ``redis.RedisCluster``.

    The client stays the caller's (``close`` leaves it open) unless the store
    built it in ``from_url``. ``spin`` (seconds, default 100 us, 0 = off) is how
    long a thread polls for a reply before it sleeps until the reply arrives: a
    Redis on the same host usually answers within it, and the thread then skips
    the kernel's wake-up; a slower reply makes the connection stop spinning for
    a while (see ``_redis_link.Link``).
    """

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        spin: float = DEFAULT_SPIN,
    ) -> None:
        super().__init__(clock=clock, prefix=prefix, timeout=timeout)
        self.spin = _check_spin(spin, self.timeout)
        self._router: Router
        self._clustered = isinstance(client, redis.RedisCluster)
        if isinstance(client, redis.RedisCluster):
            self._router = Cluster(client, self.timeout, self.spin)
        elif isinstance(client, redis.Redis):
            self._router = Standalone(client, self.timeout, self.spin)
        else:
            raise ConfigurationError(
                f"RedisStore needs a redis.Redis or redis.RedisCluster client, not "
                f"{type(client).__name__}; asyncio clients go to AsyncRedisStore"
            )
        self.client = client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        spin: float = DEFAULT_SPIN,
        **options: Any,
    ) -> RedisStore:
        """A store on the Redis ``url`` names; ``options`` go to the redis-py client."""
        timeout = _check_timeout(timeout)
        check_prefix(prefix)  # before the client exists: nothing to clean up on a bad one
        _check_spin(spin, timeout)
        client = sync_client(url, timeout, options)
        store = cls(client, clock=clock, prefix=prefix, timeout=timeout, spin=spin)
        store._owns_client = True
        return store

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow, in one atomic script.

        Raises ``StorageUnavailableError`` when Redis does not answer in time.
        """
        shape, found, route_key, packed = self._request(algorithm, key, rates, cost)
        try:
            reply = self._router.eval(found, route_key, packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return _plan.decode(shape.rates, shape.cost, reply)

    def hit_all(self, algorithm: str, calls: Sequence[_plan.BatchCall]) -> list[Decision] | None:
        """Decide several ``(key, rates, cost)`` calls in one atomic script; see
        ``MemoryStore.hit_all``.

        None when they cannot share one script: on a Cluster, keys that hash to
        different slots (nothing is sent then; decide them another way).
        """
        found = _plan.batch(self._shapes, algorithm, calls)
        request = self._batch(found) if found else None
        if request is None:
            return None if found else []
        found_script, route_key, packed = request
        try:
            reply = self._router.eval(found_script, route_key, packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return _plan.decode_batch(found, reply)

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Delete the state of ``key`` under these rates."""
        plan = _plan.build(algorithm, self.prefix, key, rates, 0)
        self._command(plan.keys[0], "DEL", *plan.keys)

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """Hold ``slots`` of ``limit`` concurrent slots on ``key`` for ``ttl_us`` (a lease)."""
        keys, args = self._acquire_call(key, limit, lease_id, slots, ttl_us)
        return _plan.parse_acquire(limit, slots, self._eval("concurrency", keys, args))

    def release_slot(self, key: str, lease_id: str) -> bool:
        """Give the lease's slots back; False if it was not held (expired or never granted)."""
        keys, args = self._release_call(key, lease_id)
        return bool(self._eval("concurrency", keys, args)[1])

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """Extend a held lease to ``ttl_us`` from now; False if it was not held."""
        keys, args = self._renew_call(key, lease_id, ttl_us)
        return bool(self._eval("concurrency", keys, args)[1])

    def ping(self) -> bool:
        """True when the server (every Cluster primary) answers within the timeout."""
        try:
            self._router.ping()
        except REDIS_ERRORS:
            return False
        return True

    def close(self) -> None:
        """Close the store's connections (and the client, if ``from_url`` made it)."""
        self._router.close()
        if self._owns_client:
            self.client.close()

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` (token budgets, fair shares: ``ratewarden.storage.Op``) as one script."""
        return [int(value) for value in self._eval(op.script, op.keys, self._op_args(op))]

    def _eval(self, script_name: str, keys: Sequence[str], args: Sequence[Sendable]) -> Any:
        """Run script ``script_name`` atomically on the keys' server; its raw reply.

        For scripts other than the rate algorithms (concurrency leases, token
        budgets): all ``keys`` must share one hash tag. NOSCRIPT, failover and
        redirection are handled here, and errors come out as ``StorageError``
        subclasses.
        """
        try:
            packed = evalsha_command(script(script_name), keys, args)
            return self._router.eval(script(script_name), keys[0], packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)

    def _command(self, route_key: str, *parts: Sendable) -> Any:
        try:
            return self._router.command(route_key, *parts)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)

    def __repr__(self) -> str:
        return self._describe(self._router.where)


class AsyncRedisStore(_RedisBase):
    """The asyncio twin of ``RedisStore``, over ``redis.asyncio.Redis`` or ``RedisCluster``.

    Concurrent decisions share pipelined writes on one connection per server.
    """

    def __init__(
        self,
        client: aredis.Redis | aredis.RedisCluster,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(clock=clock, prefix=prefix, timeout=timeout)
        self._router: AsyncRouter
        self._clustered = isinstance(client, aredis.RedisCluster)
        if isinstance(client, aredis.RedisCluster):
            self._router = AsyncCluster(client, self.timeout)
        elif isinstance(client, aredis.Redis):
            self._router = AsyncStandalone(client, self.timeout)
        else:
            raise ConfigurationError(
                f"AsyncRedisStore needs a redis.asyncio.Redis or redis.asyncio.RedisCluster "
                f"client, not {type(client).__name__}; blocking clients go to RedisStore"
            )
        self.client = client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        **options: Any,
    ) -> AsyncRedisStore:
        """See ``RedisStore.from_url``; the client connects on first use."""
        timeout = _check_timeout(timeout)
        check_prefix(prefix)
        client = async_client(url, timeout, options)
        store = cls(client, clock=clock, prefix=prefix, timeout=timeout)
        store._owns_client = True
        return store

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """See ``RedisStore.hit``."""
        shape, found, route_key, packed = self._request(algorithm, key, rates, cost)
        try:
            reply = await self._router.eval(found, route_key, packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return _plan.decode(shape.rates, shape.cost, reply)

    async def hit_all(
        self, algorithm: str, calls: Sequence[_plan.BatchCall]
    ) -> list[Decision] | None:
        """See ``RedisStore.hit_all``."""
        found = _plan.batch(self._shapes, algorithm, calls)
        request = self._batch(found) if found else None
        if request is None:
            return None if found else []
        found_script, route_key, packed = request
        try:
            reply = await self._router.eval(found_script, route_key, packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)
        return _plan.decode_batch(found, reply)

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``RedisStore.reset``."""
        plan = _plan.build(algorithm, self.prefix, key, rates, 0)
        await self._command(plan.keys[0], "DEL", *plan.keys)

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """See ``RedisStore.acquire_slot``."""
        keys, args = self._acquire_call(key, limit, lease_id, slots, ttl_us)
        return _plan.parse_acquire(limit, slots, await self._eval("concurrency", keys, args))

    async def release_slot(self, key: str, lease_id: str) -> bool:
        """See ``RedisStore.release_slot``."""
        keys, args = self._release_call(key, lease_id)
        return bool((await self._eval("concurrency", keys, args))[1])

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """See ``RedisStore.renew_slot``."""
        keys, args = self._renew_call(key, lease_id, ttl_us)
        return bool((await self._eval("concurrency", keys, args))[1])

    async def ping(self) -> bool:
        """See ``RedisStore.ping``."""
        try:
            await self._router.ping()
        except REDIS_ERRORS:
            return False
        return True

    async def aclose(self) -> None:
        """Close the store's connections (and the client, if ``from_url`` made it)."""
        await self._router.aclose()
        if self._owns_client:
            await self.client.aclose()

    async def apply(self, op: Op) -> list[int]:
        """See ``RedisStore.apply``."""
        return [int(value) for value in await self._eval(op.script, op.keys, self._op_args(op))]

    async def _eval(self, script_name: str, keys: Sequence[str], args: Sequence[Sendable]) -> Any:
        """See ``RedisStore._eval``."""
        try:
            packed = evalsha_command(script(script_name), keys, args)
            return await self._router.eval(script(script_name), keys[0], packed)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)

    async def _command(self, route_key: str, *parts: Sendable) -> Any:
        try:
            return await self._router.command(route_key, *parts)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self._router.where, self.timeout)

    def __repr__(self) -> str:
        return self._describe(self._router.where)
