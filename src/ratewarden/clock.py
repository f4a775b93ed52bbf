"""Where "now" comes from.

Algorithms never read a clock: stores pass ``now`` (integer microseconds since
the epoch) into them. The Redis store reads Redis ``TIME`` unless it is given a
clock, so that every gateway shares one clock; the memory store uses
``SystemClock`` unless given another. Tests use ``ratewarden.testing.ManualClock``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, cast, runtime_checkable

from ratewarden.checks import refuse_class
from ratewarden.errors import ConfigurationError

__all__ = ["Clock", "SystemClock", "check_clock"]


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


def check_clock(owner: str, clock: object) -> Clock | None:
    """``clock`` as given (None: the owner's default), or ``ConfigurationError`` naming
    ``owner`` and ``clock`` when it has no callable ``now_us``, the one method a store calls:
    ``clock=5`` would otherwise be taken, and fail at the first hit with an AttributeError.
    A class is refused too (``clock=ManualClock``, the ``()`` forgotten): its ``now_us`` is
    callable, and every hit would be a TypeError for the missing ``self``."""
    refuse_class(owner, "clock", clock, needs="now_us", kind="clock")
    if clock is None or callable(getattr(clock, "now_us", None)):
        return cast("Clock | None", clock)
    name = type(clock).__name__
    kind = f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"
    raise ConfigurationError(
        f"{owner}: clock {clock!r:.60} ({kind}) is not a clock: it has no now_us(); give "
        "ratewarden.clock.SystemClock(), "
        "ratewarden.testing.ManualClock(), or leave clock out for the system clock"
    )


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
