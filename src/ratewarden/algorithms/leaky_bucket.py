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

from ratewarden.algorithms import _bucket
from ratewarden.algorithms._base import Step
from ratewarden.algorithms._bucket import params

__all__ = ["NAME", "State", "check", "params"]

NAME = "leaky_bucket"

#: ``(level, last_us)``: ``level / d`` requests queued at ``last_us``; ``0 <= level <= capacity*d``.
State = tuple[int, int]


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    level, last_us = (0, now_us) if state is None else state
    outcome, used, since, ttl_us = _bucket.step(params, level, last_us, now_us, cost, True)
    if not outcome[0]:
        return outcome, state, 0
    return outcome, (used, since), ttl_us
