"""A limiter on the memory store and its manual clock, as the algorithm tests use them."""

from __future__ import annotations

from datetime import UTC, datetime

from ratewarden import Limiter, MemoryStore
from ratewarden.testing import ManualClock

SECOND = 1_000_000
#: 12:00:00 UTC: the start of a minute, an hour and a day, where windows align.
NOON = datetime(2024, 3, 1, 12, 0, tzinfo=UTC).timestamp()


def limiter_at(algorithm: str, start: float = NOON) -> tuple[Limiter, ManualClock]:
    """A limiter running ``algorithm`` on the memory store, and its clock, set to ``start``."""
    clock = ManualClock(start)
    return Limiter(MemoryStore(clock=clock), algorithm=algorithm), clock
