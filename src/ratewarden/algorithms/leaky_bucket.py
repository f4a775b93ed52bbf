"""Leaky bucket: a queue of capacity ``B`` that drains at the rate; a request adds to it.

The mirror image of the token bucket. A key starts empty. Each admitted request
of cost ``c`` pours ``c`` requests' worth into the bucket, which leaks at
``limit`` per ``period``. A request is admitted when it fits on top of what is
still in the bucket (``level + c <= B``, ``B`` the rate's capacity); a denial
adds nothing and waits until enough has leaked out.

One bucket, two uses:

- **Policer** (``Limiter.hit``): admit or deny now and ignore ``delay``. Its
  admissions are exactly the token bucket's: the level here is the tokens
  missing there.
- **Shaper** (``Limiter.acquire``, or any caller that honours ``delay``): the
  bucket is a queue and the level is the work ahead of a new request, so an
  admitted request leaves after ``delay = level / rate``, rounded up to the
  microsecond (0 when the bucket is empty). Callers that wait out their delay
  leave one emission interval ``T = period / limit`` apart: the output is
  smooth even when the input comes in bursts.

Burst: ``B`` requests back to back from rest. The policer lets all ``B``
through at once, the shaper queues them with delays ``0, T, ..., (B-1)*T``;
then one more fits every ``T``. Over any interval of length ``L`` at most
``B + L / T`` are admitted.

State: ``(level, last_us)``, what is in the bucket at ``last_us``, counted in
units of ``1/d`` request with ``T = d/n`` microseconds in lowest terms. One
request is ``d`` units, the bucket drains exactly ``n`` units per microsecond
and holds ``B*d`` units, so no rounding error accumulates. The drain is lazy
and clamped at empty before any multiplication, so every number stays below
2**53, where the Lua twin's doubles are exact too. A clock that steps back
(``now < last_us``) drains nothing until it passes ``last_us`` again, and every
reported time counts from ``now``.

Effective window (``refill_after_us``): once ``remaining`` more requests are
poured in, less than one request's room is free, and one more fits when the
rest of that room has drained: at most one emission interval (exactly one from
an empty bucket). For the shaper it counts admissions into the queue, as
``remaining`` does, not departures: the admitted requests leave over their
``delay``.
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome, Step, ceil_div
from ratewarden.rate import Rate

__all__ = ["NAME", "State", "check", "params"]

NAME = "leaky_bucket"

#: ``(level, last_us)``: ``level / d`` requests queued at ``last_us``; ``0 <= level <= capacity*d``.
State = tuple[int, int]


def params(rate: Rate) -> tuple[int, ...]:
    """``(n, d, capacity)``: drain ``n`` units per microsecond; a request is ``d`` units."""
    n, d = rate.reduced
    return (n, d, rate.capacity)


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    n, d, capacity = params
    room = capacity * d
    level, last_us = (0, now_us) if state is None else state
    # A clock behind last_us is held at last_us: nothing drains twice.
    lag = max(last_us - now_us, 0)
    since = now_us + lag
    elapsed = since - last_us
    # Compare with the time to empty before multiplying: elapsed * n stays below level.
    if elapsed >= ceil_div(level, n):
        level = 0
    else:
        level -= elapsed * n
    free = room - level
    need = cost * d
    if cost > capacity or need > free:
        reset_after_us = lag + ceil_div(level, n)
        retry_after_us = NEVER if cost > capacity else lag + ceil_div(need - free, n)
        # Pouring in the whole requests that fit leaves free % d; one more fits d - free % d later.
        refill_us = lag + ceil_div(d - free % d, n)
        outcome = Outcome(False, free // d, reset_after_us, retry_after_us, 0, refill_us)
        return outcome, state, 0
    # The new request leaves once everything ahead of it has drained.
    delay_us = lag + ceil_div(level, n)
    level += need
    free = room - level
    # Empty again is the same as never seen: the store may forget the key then.
    reset_after_us = lag + ceil_div(level, n)
    refill_us = lag + ceil_div(d - free % d, n)
    outcome = Outcome(True, free // d, reset_after_us, 0, delay_us, refill_us)
    return outcome, (level, since), reset_after_us
