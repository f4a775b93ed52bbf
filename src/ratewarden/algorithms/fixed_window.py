"""Fixed window: a counter per epoch-aligned window of one period.

Time is cut into windows ``[k*P, (k+1)*P)`` counted from the Unix epoch (window
index ``now // P``, as envoyproxy/ratelimit does), so every key and every
gateway agrees on where a window starts. A request of cost ``c`` is allowed
when ``count + c <= limit`` in the current window; a new window starts from 0.

Burst: up to twice the limit around a boundary. ``limit`` requests in the last
microsecond of one window and ``limit`` more in the first microsecond of the
next are all allowed, so a trailing period can hold ``2 * limit``. Use
``sliding_window`` or ``sliding_log`` when that matters.

State: two integers, ``(window_index, count)``. A state from any other window
counts as empty, so it expires (is as if never seen) at the end of its window.
The state holds no limit (nor does its key), so a limit changed mid-window
goes on counting: a count above a lowered limit denies until the window ends.

Effective window (``refill_after_us``): the window's end. Nothing more than
``remaining`` can be used before it, and the next window starts from 0.
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome, Step, counted_params, new_outcome
from ratewarden.rate import Rate

__all__ = ["NAME", "State", "check", "params"]

NAME = "fixed_window"

#: ``(window_index, count)``: ``count`` admitted in window ``window_index``.
State = tuple[int, int]


def params(rate: Rate) -> tuple[int, ...]:
    """``(limit, period_us)``; a window counts ``limit`` and has no separate burst."""
    return counted_params(NAME, rate, "window")


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    limit, period = params
    window = now_us // period
    count = state[1] if state is not None and state[0] == window else 0
    # Everything counted now is forgotten when this window ends.
    to_end = period - (now_us - window * period)
    if count + cost > limit:
        # The next window starts from 0, where any cost up to the limit fits.
        retry_after = NEVER if cost > limit else to_end
        # A count above the limit was admitted under a higher one (the state is named
        # without the limit): nothing remains, and the window's end still resets it.
        remaining = max(limit - count, 0)
        outcome = Outcome(False, remaining, to_end if count > 0 else 0, retry_after, 0, to_end)
        return outcome, state, 0
    total = count + cost
    reset_after = to_end if total > 0 else 0
    outcome = new_outcome(Outcome, (True, limit - total, reset_after, 0, 0, to_end))
    return outcome, (window, total), reset_after
