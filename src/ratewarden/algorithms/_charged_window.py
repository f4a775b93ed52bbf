"""A fixed window that counts every hit charged, a denied call's too: the pure twin of
``charged_window.lua`` (``serve --charge-denied``; ``ratewarden.server.charged_window``
builds its operation and reads its reply).

Per rate, in its window ``now // period`` (epoch-aligned, as ``fixed_window``): the count
is every hit charged in the window; the call's cost is added to every rate (a cost of 0
checks, adding nothing); a rate is over when its count passes its limit, and the call is
allowed when none is. ``run`` takes exactly the script's ARGV and key states and returns
exactly its reply and its writes, so the memory store, memcached and Redis answer alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratewarden.algorithms._base import NEVER

__all__ = ["run"]


def run(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[list[int], list[tuple[int, Any, int]]]:
    """The reply of ``charged_window.lua`` for these ARGV and key states, and its writes
    ``(index, (window, count), expires_at_us)``."""
    cost = int(args[1])
    reply = [now, 1]
    writes = []
    for i, state in enumerate(states):
        limit, period = int(args[2 + 2 * i]), int(args[3 + 2 * i])
        window = now // period
        count = int(state[1]) if state is not None and int(state[0]) == window else 0
        to_end = period - (now - window * period)
        total = count + cost
        if cost > 0:
            writes.append((i, (window, total), now + to_end))
        allowed, remaining, retry = 1, limit - total, 0
        if total > limit:
            allowed, remaining, retry = 0, 0, NEVER if cost > limit else to_end
            reply[1] = 0
        reply += [allowed, remaining, to_end if total > 0 else 0, retry, 0, to_end]
    return reply, writes
