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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Op

__all__ = ["AsyncSplitStore", "per_second"]

_SECOND_US = 1_000_000
_MINUTE_US = 60 * _SECOND_US


def per_second(rates: Rate | Sequence[Rate]) -> bool:
    """Whether every rate is per second: a whole number of seconds, under a minute."""
    if isinstance(rates, Rate):
        rates = (rates,)
    return bool(rates) and all(
        rate.period_us < _MINUTE_US and rate.period_us % _SECOND_US == 0 for rate in rates
    )


class AsyncSplitStore:
    """Rate calls on per-second rates to ``per_second``, everything else to ``store``."""

    def __init__(self, store: AsyncStore, per_second_store: AsyncStore) -> None:
        self.store = store
        self.per_second = per_second_store
        self.clock = store.clock

    def _pick(self, rates: Rate | Sequence[Rate]) -> Any:
        return self.per_second if per_second(rates) else self.store

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
