"""Sliding window: two epoch-aligned counters and a weighted estimate.

Windows are epoch-aligned as in ``fixed_window`` (index ``now // P``). The
count in the trailing period is estimated from the current window's count and
the previous window's, weighted by how much of the previous window the
trailing period still covers::

    estimate = prev * (P - elapsed) / P + cur        (elapsed = now - window start)

A request of cost ``c`` is allowed when ``estimate + c <= limit``, tested
without division as ``prev*(P - elapsed) + (cur + c)*P <= limit*P``. Those
products are computed as IEEE doubles, in the same order here and in the Lua
twin: they are exact integers below 2**53 (all ordinary rates), and above it
(say 10**6/day) both twins round identically, so they still agree bit for bit.

Burst: above the limit at times. The estimate assumes the previous window's
requests were spread evenly; when they were bunched at its end, a trailing
period can hold more than ``limit``: up to ``2 * limit - 1`` against a client
that waits out each retry_after (199 at 100/minute), far less for spread
traffic. ``sliding_log`` is exact.

State: three integers, ``(window_index, prev_count, cur_count)``. It is as if
never seen two windows after its own started (its counts no longer weigh). The
state holds no limit (nor does its key), so a limit changed mid-window goes on
counting: above a lowered limit the estimate denies, with ``remaining`` 0, until
the counts weigh little enough.

Effective window (``refill_after_us``): when the estimate first admits one
more unit once ``remaining`` more are counted in this window (the estimate is
then full): ``_retry_after`` for a cost of 1 from that count, the same doubles
in the same order as the retry time's, so exact below 2**53 and identical in
the Lua twin above it. Within this window that is when the previous window's
weight has fallen by enough; when this window alone holds the limit, it is in
the next window, once this window's count weighs little enough.
"""

from __future__ import annotations

import math

from ratewarden.algorithms._base import NEVER, Outcome, Step, counted_params, new_outcome
from ratewarden.rate import Rate

__all__ = ["NAME", "State", "check", "params"]

NAME = "sliding_window"

#: ``(window_index, prev_count, cur_count)``: counts of windows index - 1 and index.
State = tuple[int, int, int]


def params(rate: Rate) -> tuple[int, ...]:
    """``(limit, period_us)``; a window counts ``limit`` and has no separate burst."""
    return counted_params(NAME, rate, "window")


def _counts(state: State | None, window: int) -> tuple[int, int]:
    """``(prev, cur)`` as seen from ``window``: a state rolls forward one window, then empties."""
    if state is None:
        return 0, 0
    index, prev, cur = state
    if index == window:
        return prev, cur
    if index == window - 1:
        return cur, 0
    return 0, 0


def _retry_after(limit: int, period: int, elapsed: int, prev: int, cur: int, cost: int) -> int:
    """Microseconds until the estimate first admits ``cost``; ``cost <= limit``, denied now."""
    if cur + cost <= limit:
        # Later in this window: prev's weight must fall to (limit - cur - cost) * P,
        # i.e. P - elapsed <= that / prev. A denial here implies prev > 0.
        allowance = math.floor(float(limit - cur - cost) * float(period) / float(prev))
        wait = period - allowance - elapsed
    else:
        # Only in the next window, where this window's count is the weighted one
        # (and cur > 0, since cost <= limit < cur + cost).
        allowance = math.floor(float(limit - cost) * float(period) / float(cur))
        wait = period - elapsed + period - allowance
    # Exact below 2**53; above it float rounding could put the instant at or
    # before now, and a denial must never say "retry now".
    return max(wait, 1)


def _refill_after(limit: int, period: int, elapsed: int, prev: int, used: int) -> int:
    """Microseconds until one more unit fits once ``used`` are counted in this window.

    ``used`` fills the estimate (``remaining`` was counted in): one more fits
    only after a wait, which ``_retry_after`` gives for a cost of 1. With
    nothing weighted from the previous window the estimate is ``used`` itself
    and cannot be full below the limit, so a count below it is the doubles'
    rounding above 2**53: the earliest answer, 1, as ``_retry_after`` floors it.
    """
    if used < limit and prev == 0:
        return 1
    return _retry_after(limit, period, elapsed, prev, used, 1)


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    limit, period = params
    window = now_us // period
    elapsed = now_us - window * period
    prev, cur = _counts(state, window)
    # Everything below is scaled by P; see the module docstring on doubles.
    weighted = float(prev) * float(period - elapsed)
    room = float(limit) * float(period)
    allowed = cost <= limit and weighted + float(cur + cost) * float(period) <= room
    total = cur + cost if allowed else cur
    # At least 0: after the clock steps back within a window, the previous window weighs
    # more than it did when this window's count was admitted, and the estimate passes the
    # limit (every other algorithm says 0 there too).
    remaining = max(
        math.floor((room - (weighted + float(total) * float(period))) / float(period)), 0
    )
    # Counts of this window weigh until the end of the next one; prev's until this one ends.
    if total > 0:
        reset_after = 2 * period - elapsed
    elif prev > 0:
        reset_after = period - elapsed
    else:
        reset_after = 0
    refill_after = _refill_after(limit, period, elapsed, prev, total + remaining)
    if allowed:
        outcome = new_outcome(Outcome, (True, remaining, reset_after, 0, 0, refill_after))
        return outcome, (window, prev, total), reset_after
    retry_after = NEVER if cost > limit else _retry_after(limit, period, elapsed, prev, cur, cost)
    return Outcome(False, remaining, reset_after, retry_after, 0, refill_after), state, 0
