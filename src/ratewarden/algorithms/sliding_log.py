"""Sliding log: every admitted request's timestamp, counted exactly.

The state is the log of admitted requests, ``(timestamp_us, cost)`` in the
order they were admitted. An entry counts while ``timestamp > now - P``; a
request of cost ``c`` is allowed when the live entries' costs plus ``c`` are at
most ``limit``. On admission the expired prefix is dropped and the new entry
appended (the Lua twin does the same to a Redis list: LTRIM, RPUSH, PEXPIRE).

Entries are stamped ``max(now, newest timestamp)``, so timestamps never
decrease even if the clock steps back: the expired entries are always a prefix,
and a step back can only make an entry count longer, never shorter.

Burst: none. No trailing period of length ``P`` ever holds more than
``limit``; a denied request learns exactly when enough of the oldest entries
will have aged out for it.

State: one entry per admitted request in the trailing period, up to ``limit``
entries (about 20 bytes each in Redis). The log holds no limit (nor does its key),
so a limit changed mid-period goes on counting it: above a lowered limit, requests
are denied until enough of the oldest entries age out. Prefer ``sliding_window`` (three
integers) when the limit is large and a small overshoot is acceptable.

Effective window (``refill_after_us``): when the oldest live entry ages out.
Once ``remaining`` more are used the log holds exactly ``limit``, and the
oldest entry (at least one unit) is the first to go; with an empty log, the
units used now are that entry, so one period. Above a lowered limit, when enough
of the oldest have aged out for one unit.
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome, Step, counted_params
from ratewarden.rate import Rate

__all__ = ["NAME", "State", "check", "params"]

NAME = "sliding_log"

#: ``((timestamp_us, cost), ...)`` in admission order; timestamps never decrease.
State = tuple[tuple[int, int], ...]


def params(rate: Rate) -> tuple[int, ...]:
    """``(limit, period_us)``; the log counts ``limit`` per period and has no separate burst."""
    return counted_params(NAME, rate, "period")


def _retry_after(live: State, limit: int, period: int, now_us: int, used: int, cost: int) -> int:
    """When enough of the oldest entries have aged out (at timestamp + P) for ``cost`` to fit."""
    for stamp, held in live:
        used -= held
        if used + cost <= limit:
            return stamp + period - now_us
    # Even an empty log cannot hold it: cost > limit.
    return NEVER


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    limit, period = params
    entries = state or ()
    horizon = now_us - period
    start = 0
    while start < len(entries) and entries[start][0] <= horizon:
        start += 1
    live = entries[start:]
    used = sum(entry[1] for entry in live)
    allowed = used + cost <= limit
    if allowed and cost > 0:
        stamp = max(now_us, live[-1][0]) if live else now_us
        live = (*live, (stamp, cost))
        used += cost
    # The log is as if never seen once its newest entry ages out.
    reset_after = live[-1][0] + period - now_us if live else 0
    refill_after = live[0][0] + period - now_us if live else period
    if used > limit:  # more than the oldest entry must age out before one unit fits
        refill_after = _retry_after(live, limit, period, now_us, used, 1)
    if allowed:
        return Outcome(True, limit - used, reset_after, 0, 0, refill_after), live, reset_after
    retry_after = _retry_after(live, limit, period, now_us, used, cost)
    # Entries admitted under a higher limit may hold more than this one: nothing remains.
    remaining = max(limit - used, 0)
    return Outcome(False, remaining, reset_after, retry_after, 0, refill_after), state, 0
