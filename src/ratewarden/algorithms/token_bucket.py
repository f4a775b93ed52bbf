"""Token bucket: a bucket of ``B`` tokens that refills at the rate; a request spends tokens.

A key starts full with ``B`` tokens (the rate's capacity, ``burst`` or ``limit``).
Tokens flow back in at ``limit`` per ``period`` and never past ``B``. A request
of cost ``c`` is allowed when the bucket holds at least ``c`` tokens, and then
takes them; a denial takes nothing and waits until ``c`` tokens have flowed in.
A token bucket of capacity 20 refilling 100 per minute is
``Rate.parse("100/minute", burst=20)``.

Burst: ``B`` requests back to back from rest, then one every emission interval
``T = period / limit``. Over any interval of length ``L`` at most
``B + L / T`` requests are admitted. (Admission is the same as GCRA's; the
state differs: tokens and a timestamp instead of one timestamp.)

State: ``(level, last_us)``, the tokens held at ``last_us``, counted in units of
``1/d`` token with ``T = d/n`` microseconds in lowest terms. One token is ``d``
units, the refill is exactly ``n`` units per microsecond and the bucket holds
``B*d`` units, so no rounding error accumulates however long the run. The
refill is computed lazily on the next request, clamped to the bucket before any
multiplication, so a long idle time never overflows 2**53, where the Lua twin's
doubles are exact too. A clock that steps back (``now < last_us``) refills
nothing until it passes ``last_us`` again, and every reported time counts from
``now``.

Effective window (``refill_after_us``): once ``remaining`` whole tokens are
spent, less than one token is left, and one more can be spent when the rest of
it has flowed in: at most one emission interval (exactly one from a full
bucket).
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome, Step, ceil_div, new_outcome
from ratewarden.rate import Rate

__all__ = ["NAME", "State", "check", "params"]

NAME = "token_bucket"

#: ``(level, last_us)``: ``level / d`` tokens held at ``last_us``; ``0 <= level <= capacity*d``.
State = tuple[int, int]


def params(rate: Rate) -> tuple[int, ...]:
    """``(n, d, capacity)``: refill ``n`` units per microsecond; a token is ``d`` units."""
    n, d = rate.reduced
    return (n, d, rate.capacity)


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    n, d, capacity = params
    room = capacity * d
    level, last_us = (room, now_us) if state is None else state
    # A clock behind last_us is held at last_us: nothing refills twice.
    lag = max(last_us - now_us, 0)
    since = now_us + lag
    elapsed = since - last_us
    # Compare with the time to fill before multiplying: elapsed * n stays below room.
    if elapsed >= ceil_div(room - level, n):
        level = room
    else:
        level += elapsed * n
    need = cost * d
    if cost > capacity or level < need:
        reset_after_us = lag + ceil_div(room - level, n)
        retry_after_us = NEVER if cost > capacity else lag + ceil_div(need - level, n)
        # Spending the whole tokens leaves level % d; one token is there d - level % d later.
        refill_us = lag + ceil_div(d - level % d, n)
        outcome = Outcome(False, level // d, reset_after_us, retry_after_us, 0, refill_us)
        return outcome, state, 0
    level -= need
    # Full again is the same as never seen: the store may forget the key then.
    reset_after_us = lag + ceil_div(room - level, n)
    refill_us = lag + ceil_div(d - level % d, n)
    outcome = new_outcome(Outcome, (True, level // d, reset_after_us, 0, 0, refill_us))
    return outcome, (level, since), reset_after_us
