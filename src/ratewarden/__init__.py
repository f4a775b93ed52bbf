"""ratewarden: exact, atomic distributed rate limiting.

The table of contents: the names most programs need are importable from here (``Rate``,
``Decision``, ``Limiter``, ``TwoTier``, ``TokenBudget`` and their asyncio twins, the memory,
Redis and memcached stores, ``CircuitBreaker``, ``Clock``, ``SystemClock`` and the four base
errors; the Redis and memcached stores are imported when first asked for). Everything else
lives in the module that names it (``ratewarden.testing.ManualClock``,
``ratewarden.middleware.RuleSet``, ``ratewarden.headers.HeaderOptions``,
``ratewarden.budgets.FairShare``, ...); docs/reference.md lists each name under its module.
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
    from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore
    from ratewarden.storage.redis import AsyncRedisStore, RedisStore

__all__ = [
    "AsyncLimiter",
    "AsyncMemcacheStore",
    "AsyncMemoryStore",
    "AsyncRedisStore",
    "AsyncTokenBudget",
    "AsyncTwoTier",
    "CircuitBreaker",
    "Clock",
    "ConfigurationError",
    "Decision",
    "Limiter",
    "MemcacheStore",
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

# The Redis stores need the [redis] extra, and neither they nor the memcache stores are
# needed by most programs: import them only when asked for.
_LAZY = {
    "AsyncRedisStore": "redis",
    "RedisStore": "redis",
    "AsyncMemcacheStore": "memcache",
    "MemcacheStore": "memcache",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        try:
            found = importlib.import_module(f"ratewarden.storage.{module}")
        except ModuleNotFoundError as exc:
            # redis-py not installed: say which extra brings it, not only the module's name
            if (exc.name or "").split(".")[0] not in ("redis", "hiredis"):
                raise
            raise ModuleNotFoundError(
                f"ratewarden.{name} needs redis-py (the redis extra), which is not installed "
                f"(no module named {exc.name!r}): pip install 'ratewarden[redis]' (in a clone: "
                "pip install -e '.[redis]')",
                name=exc.name,
            ) from None
        return getattr(found, name)
    raise AttributeError(f"module 'ratewarden' has no attribute {name!r}")
