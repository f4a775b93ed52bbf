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

from ratewarden.algorithms import _bucket
from ratewarden.algorithms._base import Step
from ratewarden.algorithms._bucket import params

__all__ = ["NAME", "State", "check", "params"]

NAME = "token_bucket"

#: ``(level, last_us)``: ``level / d`` tokens held at ``last_us``; ``0 <= level <= capacity*d``.
State = tuple[int, int]


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    room = params[2] * params[1]
    # The bucket's used units are the tokens missing: a full bucket (or a new key) has none.
    if state is None:
        missing, last_us = 0, now_us
    else:
        missing, last_us = room - state[0], state[1]
    outcome, used, since, ttl_us = _bucket.step(params, missing, last_us, now_us, cost, False)
    if not outcome[0]:
        return outcome, state, 0
    return outcome, (room - used, since), ttl_us
