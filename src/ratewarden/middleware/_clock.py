"""The middlewares' clock, checked where it is given.

Every middleware reads its clock on the request path (a slot's renewal, a log
line's minute, a shadow rule's report), so ``clock=time.time`` or ``clock=5``
taken as is would turn every selected request into a 500. It is refused when the
middleware is built instead, naming the middleware and the value.
"""

from __future__ import annotations

import inspect

from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError

__all__ = ["checked_clock"]


def checked_clock(who: str, clock: object) -> Clock:
    """``clock`` when it is a ``Clock``, the system clock for None, else a
    ``ConfigurationError`` naming ``who`` and the value."""
    if clock is None:
        return SystemClock()
    if isinstance(clock, Clock) and not isinstance(clock, type):
        return clock
    if isinstance(clock, type):
        what = "that is a class; give an instance, such as SystemClock()"
    elif inspect.isroutine(clock):
        what = "that is a function; a clock is an object with now(), now_us(), sleep(), asleep()"
    else:
        what = "it has not all of now(), now_us(), sleep() and asleep()"
    raise ConfigurationError(
        f"{who} clock={clock!r:.60} is not a ratewarden.clock.Clock: {what}; give "
        "ratewarden.clock.SystemClock(), ratewarden.testing.ManualClock() in tests, or leave "
        "clock out for the system clock"
    )
