"""ratewarden: exact, atomic distributed rate limiting.

The table of contents; everything public is importable from here.
"""

from __future__ import annotations

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

__all__ = [
    "AsyncLimiter",
    "AsyncMemoryStore",
    "Clock",
    "ConfigurationError",
    "Decision",
    "Limiter",
    "MemoryStore",
    "Rate",
    "RatewardenError",
    "StorageError",
    "StorageUnavailableError",
    "SystemClock",
]

__version__ = "0.1.0"
