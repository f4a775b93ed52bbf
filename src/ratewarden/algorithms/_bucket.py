"""The bucket that ``token_bucket`` and ``leaky_bucket`` both are, written once, and the
parameters of every bucket algorithm (GCRA's too).

A bucket of ``B*d`` units (``B`` the rate's capacity) holds ``used`` units at
``last_us`` and drains ``n`` of them per microsecond (``T = d/n`` microseconds
in lowest terms, a request is ``d`` units). A request of cost ``c`` fits when
``c*d`` units are free, and then takes them. The leaky bucket's level is
``used``; the token bucket's tokens are the units free (``used`` is the tokens
missing), so the two decide alike and differ in what they store and in the
shaper's ``delay``. The Lua twin is the prelude's ``bucket_step``.

GCRA decides the same requests from one timestamp, but it has no ``last_us``:
a clock that steps back moves its timestamp's distance instead of being held,
so its step is its own (``gcra.check``).
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome, new_outcome
from ratewarden.rate import Rate

__all__ = ["params", "step"]


def params(rate: Rate) -> tuple[int, ...]:
    """``(n, d, capacity)``: ``T = d / n`` microseconds in lowest terms (so a request is
    ``d`` units, and ``n`` units drain, refill or pass per microsecond), and ``B``."""
    n, d = rate.reduced
    return (n, d, rate.capacity)


def step(
    params: tuple[int, ...], used: int, last_us: int, now_us: int, cost: int, shaper: bool
) -> tuple[Outcome, int, int, int]:
    """``(outcome, units used after the request, the time they count from, their TTL in us)``.

    The TTL is 0 when the request is denied (nothing to write). With ``shaper``, an
    admitted request's ``delay`` is its wait behind what the bucket already holds.
    Every ``-(-a // n)`` is ``ceil_div(a, n)``, inlined: this runs on every decision.
    """
    n, d, capacity = params
    room = capacity * d
    # A clock behind last_us is held at last_us: nothing drains twice.
    lag = last_us - now_us if last_us > now_us else 0
    since = now_us + lag
    # Compare with the time to empty before multiplying: elapsed * n stays below used.
    elapsed = since - last_us
    if elapsed >= -(-used // n):
        used = 0
    else:
        used -= elapsed * n
    free = room - used
    need = cost * d
    if cost > capacity or need > free:
        retry_after_us = NEVER if cost > capacity else lag - (-(need - free) // n)
        # Taking the whole requests that fit leaves free % d; one more fits d - free % d later.
        refill_us = lag - (-(d - free % d) // n)
        outcome = new_outcome(
            Outcome, (False, free // d, lag - (-used // n), retry_after_us, 0, refill_us)
        )
        return outcome, used, since, 0
    # The new request leaves once everything ahead of it has drained.
    delay_us = lag - (-used // n) if shaper else 0
    used += need
    free = room - used
    # Back to empty is the same as never seen: the store may forget the key then.
    reset_after_us = lag - (-used // n)
    refill_us = lag - (-(d - free % d) // n)
    outcome = new_outcome(Outcome, (True, free // d, reset_after_us, 0, delay_us, refill_us))
    return outcome, used, since, reset_after_us
