"""ratewarden: exact, atomic distributed rate limiting.

The table of contents; everything public is importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.clock import Clock, SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import (
    ConfigurationError,
    RatewardenError,
    StorageError,
    StorageUnavailableError,
)
from ratewarden.limiter import AsyncLimiter, Limiter
from ratewarden.rate import Rate
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.tiers import AsyncTwoTier, CircuitBreaker, TwoTier

if TYPE_CHECKING:
    from ratewarden.storage.redis import AsyncRedisStore, RedisStore

__all__ = [
    "AsyncLimiter",
    "AsyncMemoryStore",
    "AsyncRedisStore",
    "AsyncTokenBudget",
    "AsyncTwoTier",
    "CircuitBreaker",
    "Clock",
    "ConfigurationError",
    "Decision",
    "Limiter",
    "MemoryStore",
    "Rate",
    "RatewardenError",
    "RedisStore",
    "StorageError",
    "StorageUnavailableError",
    "SystemClock",
    "TokenBudget",
    "TwoTier",
]

__version__ = "0.1.0"

# The Redis stores need the [redis] extra; import them only when asked for.
_LAZY = {"AsyncRedisStore", "RedisStore"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from ratewarden.storage import redis

        return getattr(redis, name)
    raise AttributeError(f"module 'ratewarden' has no attribute {name!r}")
