"""Where rate limiting state lives, and how it is updated atomically.

Stores know nothing about algorithms beyond running them: ``MemoryStore`` calls
the pure functions under a lock, ``RedisStore`` runs their Lua twins. Both share
the sans-I/O plan in ``_plan``. An ``Op`` (keys from ``axis_key`` and
``record_key``) is one atomic step beyond the rate algorithms (token budgets,
fair shares) that every store's ``apply`` runs; ``hash_tag`` is the part of a
key's state keys that picks its Cluster slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage._keys import hash_tag
from ratewarden.storage._ops import Op, axis_key, joined_ops, record_key

__all__ = ["AsyncStore", "Op", "Store", "axis_key", "hash_tag", "joined_ops", "record_key"]


class Store(Protocol):
    """What ``Limiter`` needs from a store."""

    clock: Clock

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision: ...

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None: ...

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision: ...

    def release_slot(self, key: str, lease_id: str) -> bool: ...

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool: ...

    def ping(self) -> bool: ...

    def close(self) -> None: ...


class AsyncStore(Protocol):
    """What ``AsyncLimiter`` needs from a store."""

    clock: Clock

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision: ...

    async def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None: ...

    async def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision: ...

    async def release_slot(self, key: str, lease_id: str) -> bool: ...

    async def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool: ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...
