"""Per-second limits on a store of their own: ``AsyncSplitStore``.

envoyproxy/ratelimit can keep the counters of per-second limits on a second
Redis (``REDIS_PERSECOND``): they are the busiest counters and the shortest
lived, and a Redis of their own keeps them from crowding the others.
``AsyncSplitStore(store, per_second)`` is that: a store whose calls go to
``per_second`` when every rate of the call is per second (a period of a whole
number of seconds under a minute: ``unit: second``, with any multiplier below
60), and to ``store`` otherwise. Everything that is not a rate call (token
budgets, concurrency slots) stays on ``store``; the clock is ``store``'s.

Several calls decided in one atomic step (``hit_all``) stay one step when they
all go to the same store; calls spread over both cannot be atomic, so
``hit_all`` answers None, which makes the caller decide them another way (the
rate limit service then checks every counter, then charges).

A breaker kept per node (``CircuitBreaker(per_node=True)``, ``ratewarden serve``'s)
asks ``node_of``: the per-second store's nodes are named ``per-second`` (one
server) or ``per-second:<host:port>`` (a Cluster's primaries), the other store's as
that store names them. So an outage of one store opens its own circuits only, and
the other store's counters are still decided.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ratewarden.checks import keywords_checked, refuse_class
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Op

__all__ = ["PER_SECOND_NODE", "AsyncSplitStore", "per_second"]

#: How ``node_of`` names the per-second store's nodes (``per-second:<host:port>`` on a Cluster).
PER_SECOND_NODE = "per-second"

_SECOND_US = 1_000_000
_MINUTE_US = 60 * _SECOND_US


def per_second(rates: Rate | Sequence[Rate]) -> bool:
    """Whether every rate is per second: a whole number of seconds, under a minute."""
    if isinstance(rates, Rate):
        rates = (rates,)
    return bool(rates) and all(
        rate.period_us < _MINUTE_US and rate.period_us % _SECOND_US == 0 for rate in rates
    )


def _check_async(what: str, store: object) -> None:
    """Refuse, when built, a ``store`` that is not an asyncio store: one of ratewarden's
    blocking stores (its Decision is not awaitable), a URL, or anything without ``hit``;
    each would fail only at the first call routed to it, which for ``per_second_store``
    may be long after start. A store of the caller's whose plain ``hit`` returns
    awaitables (a wrapper) is taken, as ``AsyncLimiter`` takes it. Named by type only:
    a URL may hold a password."""
    refuse_class("AsyncSplitStore", what, store, needs="hit")
    name = type(store).__name__
    given = f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"
    hit = getattr(store, "hit", None)
    if not callable(hit):
        cure = (
            "open it with AsyncRedisStore.from_url(url)"
            if isinstance(store, str)
            else "give an AsyncMemoryStore, AsyncRedisStore.from_url(url), or another asyncio store"
        )
        raise ConfigurationError(f"AsyncSplitStore: {what} is {given}, not a store; {cure}")
    if inspect.iscoroutinefunction(hit) or not type(store).__module__.startswith("ratewarden."):
        return
    raise ConfigurationError(
        f"AsyncSplitStore: {what} is {given}, a blocking store; both of its stores are "
        "asyncio stores (AsyncMemoryStore, AsyncRedisStore, AsyncMemcacheStore, ...)"
    )


class AsyncSplitStore:
    """Rate calls on per-second rates to ``per_second``, everything else to ``store``."""

    @keywords_checked
    def __init__(self, store: AsyncStore, per_second_store: AsyncStore) -> None:
        _check_async("store", store)
        _check_async("per_second_store", per_second_store)
        self.store = store
        self.per_second = per_second_store
        self.clock = store.clock

    def _pick(self, rates: Rate | Sequence[Rate]) -> Any:
        return self.per_second if per_second(rates) else self.store

    def node_of(
        self, key: str, *, stored: bool = False, rates: Rate | Sequence[Rate] | None = None
    ) -> str:
        """The node that holds ``key``'s state for a call on ``rates`` (None: not a rate
        call, which stays on ``store``; ``stored``: a key of ``store``), for a breaker kept
        per node: ``store``'s node as it names it, or ``per-second`` (``per-second:<node>``
        on a Cluster) for the per-second store's."""
        on_second = rates is not None and not stored and per_second(rates)
        store = self.per_second if on_second else self.store
        node_of = getattr(store, "node_of", None)
        node: str = "" if node_of is None else node_of(key, stored=stored, rates=rates)
        if not on_second:
            return node
        return f"{PER_SECOND_NODE}:{node}" if node else PER_SECOND_NODE

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        decision: Decision = await self._pick(rates).hit(algorithm, key, rates, cost)
        return decision

    async def hit_all(
        self, algorithm: str, calls: Sequence[tuple[str, Sequence[Rate], int]]
    ) -> list[Decision] | None:
        """One atomic step when every call goes to one store (and it has ``hit_all``)."""
        stores = {id(self._pick(rates)): self._pick(rates) for _, rates, _ in calls}
        if len(stores) != 1:
            return None
        [store] = stores.values()
        hit_all = getattr(store, "hit_all", None)
        if hit_all is None:
            return None
        found: list[Decision] | None = await hit_all(algorithm, calls)
        return found

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        await self._pick(rates).reset(algorithm, key, rates)

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        return await self.store.acquire_slot(key, limit, lease_id, slots, ttl_us)

    async def release_slot(self, key: str, lease_id: str) -> bool:
        return await self.store.release_slot(key, lease_id)

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        return await self.store.renew_slot(key, lease_id, ttl_us)

    async def apply(self, op: Op) -> list[int]:
        found: list[int] = await self.store.apply(op)  # type: ignore[attr-defined]
        return found

    async def ping(self) -> bool:
        """Both stores answer."""
        return bool(await self.store.ping()) and bool(await self.per_second.ping())

    async def aclose(self) -> None:
        try:
            await self.store.aclose()
        finally:
            await self.per_second.aclose()

    def __repr__(self) -> str:
        return f"AsyncSplitStore({self.store!r}, per_second={self.per_second!r})"
