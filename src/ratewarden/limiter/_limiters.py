"""Limiter / AsyncLimiter: the two drivers of the decision core, a line or two per method.

Every method builds its flow in ``DecisionCore`` and runs it: ``Limiter`` with a
blocking loop, ``AsyncLimiter`` with an awaiting one. A plain limiter (every
in-process part off) answers a hit with one store call, the flow's own answer
in that case, without building the flow.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.limiter._breaker import CircuitBreaker
from ratewarden.limiter._core import FAILURE_POLICIES, DecisionCore, DecisionHook, FailureHook
from ratewarden.limiter._flows import Flow, adrive, drive
from ratewarden.limiter._local import LocalRates
from ratewarden.limiter._negative import NegativeCache
from ratewarden.limiter._slots import Lease
from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore

__all__ = ["AsyncLimiter", "Limiter"]

T = TypeVar("T")
Rates = Rate | Sequence[Rate]
Calls = Sequence[tuple[str, Rates, int]]


class Limiter(DecisionCore):
    """Decisions over a synchronous ``Store`` (a ``MemoryStore`` when none is given).

    ``hit(key, rates, cost)`` returns a ``Decision``; several rates on one key
    are checked and consumed all or nothing in one atomic store step. Every
    option below is off by default, and then a hit is one store call:

    - ``on_decision(algorithm, key, decision)``: called after every hit.
    - ``local``: the local bucket, checked first (a fraction of each key's rates,
      fixed rates, or None). A local denial never reaches the store.
    - ``negative_cache``: keys remembered as denied until their retry time (a
      number of keys, or a ``NegativeCache`` to share).
    - ``lease``: buy ``k`` units per store call and spend them here;
      ``lease_ttl``: seconds a balance lives (default: the longest period).
    - ``failure``: the failure policy, ``"open"``, ``"closed"`` or ``"local"``,
      answering when the store is unavailable or the breaker is open. None
      (the default) raises ``StorageUnavailableError`` instead.
    - ``breaker``: a ``CircuitBreaker`` in front of the store (share one per store).
    - ``metrics``: ``ratewarden.metrics.Metrics`` hooks; ``name`` is the rule label.
    - ``clock``: time for the in-process parts (default: the store's clock); without a
      store, the in-process ``MemoryStore`` made for the limiter runs on it too
      (``Limiter(clock=ManualClock())`` for tests and simulations).

    ``TwoTier`` is a Limiter with the two-tier defaults (a negative cache, a
    breaker, fail open).
    """

    def __init__(
        self,
        store: Store | None = None,
        algorithm: str = "gcra",
        *,
        on_decision: DecisionHook | None = None,
        local: LocalRates = None,
        negative_cache: int | NegativeCache | None = None,
        lease: int | None = None,
        lease_ttl: float | None = None,
        failure: str | None = None,
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "default",
        clock: Clock | None = None,
    ) -> None:
        found: Store = store if store is not None else MemoryStore(clock=clock)
        super().__init__(
            found,
            algorithm,
            clock=clock if clock is not None else found.clock,
            on_decision=on_decision,
            local=local,
            negative_cache=negative_cache,
            lease=lease,
            lease_ttl=lease_ttl,
            failure=failure,
            breaker=breaker,
            metrics=metrics,
            name=name,
        )
        self.store: Store = found

    def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` (one of this limiter's ``*_flow`` methods, or a composition of
        them) on the store, blocking."""
        return drive(self.store, flow, self.store.clock)

    def hit(
        self,
        key: str,
        rates: Rates,
        cost: int = 1,
        *,
        shadow: bool = False,
        failure: str | None = None,
        on_failure: FailureHook | None = None,
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow; never raises when over.

        With ``shadow=True`` a denial is reported as ``allowed=True, shadowed=True``
        (evaluated and counted, never enforced; nothing is consumed). ``failure``
        overrides the failure policy for this call; ``on_failure`` reports the
        failures it answers (see ``hit_flow``).
        """
        if self.plain and not shadow and (failure is None or failure in FAILURE_POLICIES):
            try:
                return self.store.hit(self.algorithm, key, rates, cost)
            except Exception as error:
                if failure is None:
                    raise
                return _failed(self, error, key, rates, cost, failure, on_failure)
        flow = self.hit_flow(
            key, rates, cost, shadow=shadow, failure=failure, on_failure=on_failure
        )
        return drive(self.store, flow)

    def peek(self, key: str, rates: Rates, *, failure: str | None = None) -> Decision:
        """The current state, consuming nothing (a hit of cost 0)."""
        return self.run(self.peek_flow(key, rates, failure=failure))

    def hit_all(self, calls: Calls) -> list[Decision] | None:
        """Several ``(key, rates, cost)`` decisions in one atomic step; see ``hit_all_flow``."""
        return self.run(self.hit_all_flow(calls))

    def reset(self, key: str, rates: Rates) -> None:
        """Forget the usage of ``key`` under these rates, here and in the store."""
        self.run(self.reset_flow(key, rates))

    def acquire(
        self, key: str, rates: Rates, cost: int = 1, *, timeout: float | None = None
    ) -> Decision:
        """Wait (on the store's clock) until allowed; see ``acquire_flow``."""
        return self.run(self.acquire_flow(key, rates, cost, timeout=timeout))

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
        """Take ``slots`` of ``limit`` concurrent slots on ``key``; see ``acquire_slot_flow``."""
        return self.run(self.acquire_slot_flow(key, limit, slots, ttl, lease_id))

    def release_slot(self, lease: Lease) -> bool:
        """Give the lease's slots back; False if it had lapsed or was never granted."""
        return self.run(self.release_slot_flow(lease))

    def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """Extend a held lease by ``ttl`` (default: its own ttl) from now."""
        return self.run(self.renew_slot_flow(lease, ttl))

    @contextmanager
    def slot(self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0) -> Iterator[Lease]:
        """``with limiter.slot(key, 10) as lease:``, released on exit when it was granted."""
        lease = self.acquire_slot(key, limit, slots=slots, ttl=ttl)
        try:
            yield lease
        finally:
            self.release_slot(lease)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.store!r}, algorithm={self.algorithm!r}{self._options()})"
        )


class AsyncLimiter(DecisionCore):
    """The asyncio twin of ``Limiter`` over an ``AsyncStore``; the same options."""

    def __init__(
        self,
        store: AsyncStore | None = None,
        algorithm: str = "gcra",
        *,
        on_decision: DecisionHook | None = None,
        local: LocalRates = None,
        negative_cache: int | NegativeCache | None = None,
        lease: int | None = None,
        lease_ttl: float | None = None,
        failure: str | None = None,
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "default",
        clock: Clock | None = None,
    ) -> None:
        found: AsyncStore = store if store is not None else AsyncMemoryStore(clock=clock)
        super().__init__(
            found,
            algorithm,
            clock=clock if clock is not None else found.clock,
            on_decision=on_decision,
            local=local,
            negative_cache=negative_cache,
            lease=lease,
            lease_ttl=lease_ttl,
            failure=failure,
            breaker=breaker,
            metrics=metrics,
            name=name,
        )
        self.store: AsyncStore = found

    async def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` on the store, awaiting each call; see ``Limiter.run``."""
        return await adrive(self.store, flow, self.store.clock)

    @property
    def hit_now(self) -> Any:
        """``hit`` without an await when the store decides in this process, else None.

        An ``AsyncMemoryStore`` has a blocking view of the same state
        (``store.immediate``): the flow then runs on it at once. Middleware calls
        this to skip two coroutines per request.
        """
        immediate = getattr(self.store, "immediate", None)
        if immediate is None:
            return None
        # A bound method, not an instance with __call__: a call with keywords then makes no
        # dict of them (about 0.4 us a call on the middleware's path).
        return _Immediate(self, immediate).hit

    async def hit(
        self,
        key: str,
        rates: Rates,
        cost: int = 1,
        *,
        shadow: bool = False,
        failure: str | None = None,
        on_failure: FailureHook | None = None,
    ) -> Decision:
        """See ``Limiter.hit``."""
        if self.plain and not shadow and (failure is None or failure in FAILURE_POLICIES):
            try:
                return await self.store.hit(self.algorithm, key, rates, cost)
            except Exception as error:
                if failure is None:
                    raise
                return _failed(self, error, key, rates, cost, failure, on_failure)
        flow = self.hit_flow(
            key, rates, cost, shadow=shadow, failure=failure, on_failure=on_failure
        )
        return await adrive(self.store, flow)

    async def peek(self, key: str, rates: Rates, *, failure: str | None = None) -> Decision:
        """See ``Limiter.peek``."""
        return await self.run(self.peek_flow(key, rates, failure=failure))

    async def hit_all(self, calls: Calls) -> list[Decision] | None:
        """See ``Limiter.hit_all``."""
        return await self.run(self.hit_all_flow(calls))

    async def reset(self, key: str, rates: Rates) -> None:
        """See ``Limiter.reset``."""
        await self.run(self.reset_flow(key, rates))

    async def acquire(
        self, key: str, rates: Rates, cost: int = 1, *, timeout: float | None = None
    ) -> Decision:
        """See ``Limiter.acquire``."""
        return await self.run(self.acquire_flow(key, rates, cost, timeout=timeout))

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
        return await self.run(self.acquire_slot_flow(key, limit, slots, ttl, lease_id))

    async def release_slot(self, lease: Lease) -> bool:
        """See ``Limiter.release_slot``."""
        return await self.run(self.release_slot_flow(lease))

    async def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """See ``Limiter.renew_slot``."""
        return await self.run(self.renew_slot_flow(lease, ttl))

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
        return (
            f"{type(self).__name__}({self.store!r}, algorithm={self.algorithm!r}{self._options()})"
        )


class _Immediate:
    """``AsyncLimiter.hit_now`` is ``hit``: the limiter's flow run on the store's blocking view."""

    __slots__ = ("_limiter", "_store")

    def __init__(self, limiter: AsyncLimiter, store: Store) -> None:
        self._limiter = limiter
        self._store = store

    def hit(
        self,
        key: str,
        rates: Rates,
        cost: int = 1,
        *,
        shadow: bool = False,
        failure: str | None = None,
        on_failure: FailureHook | None = None,
    ) -> Decision:
        limiter = self._limiter
        if limiter.plain and not shadow and (failure is None or failure in FAILURE_POLICIES):
            try:
                return self._store.hit(limiter.algorithm, key, rates, cost)
            except Exception as error:
                if failure is None:
                    raise
                return _failed(limiter, error, key, rates, cost, failure, on_failure)
        flow = limiter.hit_flow(
            key, rates, cost, shadow=shadow, failure=failure, on_failure=on_failure
        )
        return drive(self._store, flow, self._store.clock)


class _Failing:
    """A store whose every method raises ``error``: what a plain hit's one call did."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise self.error


def _failed(
    limiter: DecisionCore,
    error: Exception,
    key: str,
    rates: Rates,
    cost: int,
    failure: str,
    on_failure: FailureHook | None,
) -> Decision:
    """A plain limiter's hit whose one store call raised ``error``, under a per-call policy.

    A plain hit skips the flow (one store call and its Decision as is); when that
    call fails, the flow runs on a store raising the same error, so the policy
    answers (or the error is raised) exactly as the flow would have.
    """
    flow = limiter.hit_flow(key, rates, cost, failure=failure, on_failure=on_failure)
    return drive(_Failing(error), flow, limiter.clock)
