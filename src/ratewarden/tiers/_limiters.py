"""TwoTier / AsyncTwoTier: the twin shells that drive the shared flow over a store."""

from __future__ import annotations

from collections.abc import Sequence

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import StorageError
from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.tiers._breaker import CircuitBreaker
from ratewarden.tiers._flow import Flow, _Pending, _TwoTierBase
from ratewarden.tiers._local import LocalRates
from ratewarden.tiers._negative import DEFAULT_NEGATIVE_KEYS

__all__ = ["AsyncTwoTier", "TwoTier"]


class TwoTier(_TwoTierBase):
    """A local tier in this process in front of a global ``Store``; ``hit`` like ``Limiter.hit``.

    Options (all keyword):

    - ``local``: the local bucket, checked first (a fraction of each key's global
      rates, fixed rates, or None for none). A local denial never reaches the store.
    - ``negative_cache``: keys remembered as denied until their retry time
      (default 10,000; None turns it off).
    - ``lease``: buy ``k`` units per store call and spend them here (None: every
      request asks the store). ``lease_ttl``: seconds a balance lives (default:
      the longest period of the key's rates).
    - ``failure``: ``"open"``, ``"closed"`` or ``"local"``, what answers when the
      store is unavailable or the breaker is open (default ``"open"``, Envoy's).
    - ``breaker``: a ``CircuitBreaker`` (share one per store); one is made if absent.
    - ``metrics``: ``ratewarden.metrics.Metrics`` hooks; ``name`` is the rule label.
    - ``clock``: time for the local parts (default: the store's clock).
    """

    def __init__(
        self,
        store: Store | None = None,
        algorithm: str = "gcra",
        *,
        local: LocalRates = None,
        negative_cache: int | None = DEFAULT_NEGATIVE_KEYS,
        lease: int | None = None,
        lease_ttl: float | None = None,
        failure: str = "open",
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "default",
        clock: Clock | None = None,
    ) -> None:
        self.store: Store = store if store is not None else MemoryStore()
        super().__init__(
            algorithm,
            clock if clock is not None else self.store.clock,
            local=local,
            lease=lease,
            lease_ttl=lease_ttl,
            negative_cache=negative_cache,
            failure=failure,
            breaker=breaker,
            metrics=metrics,
            name=name,
        )

    def hit(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        shadow: bool = False,
        failure: str | None = None,
    ) -> Decision:
        """Decide one request; never raises for being over the limit or for a store outage.

        ``failure`` overrides the limiter's failure policy for this call (a rule's
        own policy). ``shadow=True`` reports a denial as allowed and shadowed.
        Raises ``ConfigurationError`` on bad input, before anything is consumed.
        """
        started = self._start(key, rates, cost, failure)
        if isinstance(started, _Pending):
            return self._finish(self._drive(self._rest(started), key, rates), shadow)
        return self._finish(started, shadow)

    def peek(
        self, key: str, rates: Rate | Sequence[Rate], *, failure: str | None = None
    ) -> Decision:
        """The global state of ``key``, consuming nothing (in an outage, the failure policy)."""
        return self._drive(self._flow(key, rates, 0, failure), key, rates)

    def reset(self, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget ``key``'s usage everywhere: the store, this process's bucket, lease and denial.

        Raises ``StorageUnavailableError`` when the store cannot be reached (the
        local parts are forgotten anyway).
        """
        self._forget(key, rates)
        self.store.reset(self.algorithm, key, rates)

    def _drive(self, flow: Flow, key: str, rates: Rate | Sequence[Rate]) -> Decision:
        store, algorithm = self.store, self.algorithm
        try:
            cost = next(flow)
            while True:
                reply: Decision | StorageError
                try:
                    reply = store.hit(algorithm, key, rates, cost)
                except StorageError as exc:
                    reply = exc
                cost = flow.send(reply)
        except StopIteration as done:
            result: Decision = done.value
            return result
        finally:
            flow.close()

    def __repr__(self) -> str:
        return f"TwoTier({self.store!r}, algorithm={self.algorithm!r}, failure={self.failure!r})"


class AsyncTwoTier(_TwoTierBase):
    """The asyncio twin of ``TwoTier`` over an ``AsyncStore``; the same options."""

    def __init__(
        self,
        store: AsyncStore | None = None,
        algorithm: str = "gcra",
        *,
        local: LocalRates = None,
        negative_cache: int | None = DEFAULT_NEGATIVE_KEYS,
        lease: int | None = None,
        lease_ttl: float | None = None,
        failure: str = "open",
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "default",
        clock: Clock | None = None,
    ) -> None:
        self.store: AsyncStore = store if store is not None else AsyncMemoryStore()
        super().__init__(
            algorithm,
            clock if clock is not None else self.store.clock,
            local=local,
            lease=lease,
            lease_ttl=lease_ttl,
            negative_cache=negative_cache,
            failure=failure,
            breaker=breaker,
            metrics=metrics,
            name=name,
        )

    async def hit(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        shadow: bool = False,
        failure: str | None = None,
    ) -> Decision:
        """See ``TwoTier.hit``."""
        started = self._start(key, rates, cost, failure)
        if not isinstance(started, _Pending):
            # Answered in this process (lease, local bucket, cached denial): no await at all.
            return self._finish(started, shadow)
        flow = self._rest(started)
        try:
            ask = next(flow)
        except StopIteration as done:
            return self._finish(done.value, shadow)
        return self._finish(await self._resume(flow, ask, key, rates), shadow)

    async def peek(
        self, key: str, rates: Rate | Sequence[Rate], *, failure: str | None = None
    ) -> Decision:
        """See ``TwoTier.peek``."""
        return await self._drive(self._flow(key, rates, 0, failure), key, rates)

    async def reset(self, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``TwoTier.reset``."""
        self._forget(key, rates)
        await self.store.reset(self.algorithm, key, rates)

    async def _drive(self, flow: Flow, key: str, rates: Rate | Sequence[Rate]) -> Decision:
        try:
            ask = next(flow)
        except StopIteration as done:
            result: Decision = done.value
            return result
        return await self._resume(flow, ask, key, rates)

    async def _resume(
        self, flow: Flow, cost: int, key: str, rates: Rate | Sequence[Rate]
    ) -> Decision:
        """Drive ``flow`` on from its first store call (``cost`` units)."""
        store, algorithm = self.store, self.algorithm
        try:
            while True:
                reply: Decision | StorageError
                try:
                    reply = await store.hit(algorithm, key, rates, cost)
                except StorageError as exc:
                    reply = exc
                cost = flow.send(reply)
        except StopIteration as done:
            result: Decision = done.value
            return result
        finally:
            flow.close()

    def __repr__(self) -> str:
        return (
            f"AsyncTwoTier({self.store!r}, algorithm={self.algorithm!r}, failure={self.failure!r})"
        )
