"""Where "now" comes from.

Algorithms never read a clock: stores pass ``now`` (integer microseconds since
the epoch) into them. The Redis store reads Redis ``TIME`` unless it is given a
clock, so that every gateway shares one clock; the memory store uses
``SystemClock`` unless given another. Tests use ``ratewarden.testing.ManualClock``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of time. ``now_us`` is the only method stores call on the hot path."""

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def now_us(self) -> int:
        """Whole microseconds since the Unix epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (a manual clock advances instead)."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Wait ``seconds`` without blocking the event loop."""
        ...


class SystemClock:
    """The wall clock of this process."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    def now_us(self) -> int:
        return time.time_ns() // 1_000

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    def __repr__(self) -> str:
        return "SystemClock()"
