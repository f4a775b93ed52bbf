"""Limiter / AsyncLimiter: the API most callers use.

``Limiter(store, algorithm="gcra").hit(key, rates, cost=1)`` returns a
``Decision``. Several rates on one key are checked and consumed all or nothing
in one atomic store step. The two classes share everything but the I/O call.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from types import MethodType

from ratewarden import algorithms
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.storage._plan import check_cost
from ratewarden.storage.memory import (
    AsyncMemoryStore,
    MemoryStore,
    fast_async_limiter_hit,
    fast_limiter_hit,
)

__all__ = ["AsyncLimiter", "DecisionHook", "Lease", "Limiter"]

#: Called after every decision with ``(algorithm, key, decision)``; see ``ratewarden.metrics``.
DecisionHook = Callable[[str, str, Decision], None]


@dataclass(frozen=True, slots=True)
class Lease:
    """A concurrency slot request: held when ``decision.allowed``; release it when done."""

    key: str
    lease_id: str
    limit: int
    slots: int
    ttl: float
    decision: Decision

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.decision.allowed


def _ttl_us(ttl: float) -> int:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"lease ttl {ttl!r} must be a positive number of seconds")
    return max(1, math.ceil(ttl * 1_000_000))


class _LimiterBase:
    def __init__(self, algorithm: str, on_decision: DecisionHook | None) -> None:
        self.algorithm: str = algorithms.get(algorithm).NAME
        self._on_decision = on_decision

    def _finish(self, key: str, decision: Decision, shadow: bool) -> Decision:
        if shadow and not decision.allowed:
            decision = replace(decision, allowed=True, shadowed=True)
        if self._on_decision is not None:
            self._on_decision(self.algorithm, key, decision)
        return decision

    @staticmethod
    def _check_timeout(timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
            raise ConfigurationError(f"timeout {timeout!r} must be seconds >= 0, or None to wait")
        return float(timeout)

    @staticmethod
    def _wait_for(decision: Decision, waited: float, timeout: float | None) -> float | None:
        """Seconds to sleep before trying again, or None to give up with ``decision``."""
        wait = decision.retry_after
        if math.isinf(wait) or (timeout is not None and waited + wait > timeout):
            return None
        return wait


class Limiter(_LimiterBase):
    """Synchronous limiter over a ``Store`` (``MemoryStore`` when none is given)."""

    def __init__(
        self,
        store: Store | None = None,
        algorithm: str = "gcra",
        *,
        on_decision: DecisionHook | None = None,
    ) -> None:
        super().__init__(algorithm, on_decision)
        if store is None:
            store = MemoryStore()
        self.store: Store = store
        if type(self) is Limiter and on_decision is None:
            fast = fast_limiter_hit(store, self.algorithm, MethodType(Limiter.hit, self))
            if fast is not None:
                # The C twin of ``hit`` below (see ``MemoryStore``); dropped if the
                # store is ever replaced.
                self.__dict__["hit"] = fast

    def __setattr__(self, name: str, value: object) -> None:
        if name == "store":
            self.__dict__.pop("hit", None)
        super().__setattr__(name, value)

    def hit(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow; never raises when over.

        With ``shadow=True`` a denial is reported as ``allowed=True, shadowed=True``
        (evaluated and counted, never enforced; nothing is consumed).
        """
        decision = self.store.hit(self.algorithm, key, rates, cost)
        if shadow or self._on_decision is not None:
            return self._finish(key, decision, shadow)
        return decision

    def peek(self, key: str, rates: Rate | Sequence[Rate]) -> Decision:
        """The current state, consuming nothing (a hit of cost 0)."""
        return self.store.hit(self.algorithm, key, rates, 0)

    def reset(self, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget the usage of ``key`` under these rates."""
        self.store.reset(self.algorithm, key, rates)

    def acquire(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        timeout: float | None = None,
    ) -> Decision:
        """Wait (on the store's clock) until allowed, then return the allowing Decision.

        Gives up and returns the denied Decision when the wait would pass
        ``timeout`` seconds or can never succeed. For the leaky-bucket shaper it
        also sleeps the allowed request's ``delay``.
        """
        timeout = self._check_timeout(timeout)
        check_cost(cost)
        waited = 0.0
        while True:
            decision = self.hit(key, rates, cost)
            if decision.allowed:
                self.store.clock.sleep(decision.delay)
                return decision
            wait = self._wait_for(decision, waited, timeout)
            if wait is None:
                return decision
            self.store.clock.sleep(wait)
            waited += wait

    wait = acquire

    def acquire_slot(
        self,
        key: str,
        limit: int,
        *,
        slots: int = 1,
        ttl: float = 60.0,
        lease_id: str | None = None,
    ) -> Lease:
        """Take ``slots`` of ``limit`` concurrent slots on ``key`` for at most ``ttl`` seconds.

        Returns a Lease whether or not it was granted (check ``lease.allowed``).
        A holder that crashes loses its slots after ``ttl``; long work calls
        ``renew_slot``. Acquiring again with the same ``lease_id`` renews it.
        """
        lease_id = lease_id or uuid.uuid4().hex
        decision = self.store.acquire_slot(key, limit, lease_id, slots, _ttl_us(ttl))
        return Lease(key, lease_id, limit, slots, ttl, decision)

    def release_slot(self, lease: Lease) -> bool:
        """Give the lease's slots back; False if it had lapsed or was never granted."""
        return lease.allowed and self.store.release_slot(lease.key, lease.lease_id)

    def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """Extend a held lease by ``ttl`` (default: its own ttl) from now."""
        ttl_us = _ttl_us(lease.ttl if ttl is None else ttl)
        return lease.allowed and self.store.renew_slot(lease.key, lease.lease_id, ttl_us)

    @contextmanager
    def slot(self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0) -> Iterator[Lease]:
        """``with limiter.slot(key, 10) as lease:`` — released on exit when it was granted."""
        lease = self.acquire_slot(key, limit, slots=slots, ttl=ttl)
        try:
            yield lease
        finally:
            self.release_slot(lease)

    def __repr__(self) -> str:
        return f"Limiter({self.store!r}, algorithm={self.algorithm!r})"


class AsyncLimiter(_LimiterBase):
    """The asyncio twin of ``Limiter`` over an ``AsyncStore``."""

    def __init__(
        self,
        store: AsyncStore | None = None,
        algorithm: str = "gcra",
        *,
        on_decision: DecisionHook | None = None,
    ) -> None:
        super().__init__(algorithm, on_decision)
        if store is None:
            store = AsyncMemoryStore()
        self.store: AsyncStore = store

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "store":
            super().__setattr__("hit_now", self._immediate(value))

    def _immediate(self, store: object) -> Callable[..., Decision] | None:
        """``hit_now`` for ``store``: set when the store decides in this process."""
        if type(store) is not AsyncMemoryStore or type(self).hit is not AsyncLimiter.hit:
            return None
        now = MethodType(AsyncLimiter._hit_now, self)
        if self._on_decision is None:
            # In C over the memory store's C twin, when both are built (as Limiter.hit).
            return fast_async_limiter_hit(store, self.algorithm, now) or now
        return now

    #: ``hit`` without awaiting: the same Decision, returned at once, when the store
    #: decides in this process (``AsyncMemoryStore``); None for a store that does I/O.
    #: Middleware calls it to skip two coroutines per request.
    hit_now: Callable[..., Decision] | None

    def _hit_now(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        store: AsyncMemoryStore = self.store  # type: ignore[assignment]
        decision = store._decide(self.algorithm, key, rates, cost)
        if shadow or self._on_decision is not None:
            return self._finish(key, decision, shadow)
        return decision

    async def hit(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """See ``Limiter.hit``."""
        decision = await self.store.hit(self.algorithm, key, rates, cost)
        if shadow or self._on_decision is not None:
            return self._finish(key, decision, shadow)
        return decision

    async def peek(self, key: str, rates: Rate | Sequence[Rate]) -> Decision:
        """See ``Limiter.peek``."""
        return await self.store.hit(self.algorithm, key, rates, 0)

    async def reset(self, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``Limiter.reset``."""
        await self.store.reset(self.algorithm, key, rates)

    async def acquire(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        timeout: float | None = None,
    ) -> Decision:
        """See ``Limiter.acquire``."""
        timeout = self._check_timeout(timeout)
        check_cost(cost)
        waited = 0.0
        while True:
            decision = await self.hit(key, rates, cost)
            if decision.allowed:
                await self.store.clock.asleep(decision.delay)
                return decision
            wait = self._wait_for(decision, waited, timeout)
            if wait is None:
                return decision
            await self.store.clock.asleep(wait)
            waited += wait

    wait = acquire

    async def acquire_slot(
        self,
        key: str,
        limit: int,
        *,
        slots: int = 1,
        ttl: float = 60.0,
        lease_id: str | None = None,
    ) -> Lease:
        """See ``Limiter.acquire_slot``."""
        lease_id = lease_id or uuid.uuid4().hex
        decision = await self.store.acquire_slot(key, limit, lease_id, slots, _ttl_us(ttl))
        return Lease(key, lease_id, limit, slots, ttl, decision)

    async def release_slot(self, lease: Lease) -> bool:
        """See ``Limiter.release_slot``."""
        return lease.allowed and await self.store.release_slot(lease.key, lease.lease_id)

    async def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """See ``Limiter.renew_slot``."""
        ttl_us = _ttl_us(lease.ttl if ttl is None else ttl)
        return lease.allowed and await self.store.renew_slot(lease.key, lease.lease_id, ttl_us)

    @asynccontextmanager
    async def slot(
        self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0
    ) -> AsyncIterator[Lease]:
        """See ``Limiter.slot``."""
        lease = await self.acquire_slot(key, limit, slots=slots, ttl=ttl)
        try:
            yield lease
        finally:
            await self.release_slot(lease)

    def __repr__(self) -> str:
        return f"AsyncLimiter({self.store!r}, algorithm={self.algorithm!r})"
