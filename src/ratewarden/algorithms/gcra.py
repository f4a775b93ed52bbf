"""GCRA, the generic cell rate algorithm: one timestamp per key.

The state is the theoretical arrival time (TAT): when the key would be back to
full capacity. With emission interval ``T = period / limit`` and capacity ``B``
(the rate's burst), a request of cost ``c`` at ``now`` is allowed when
``max(TAT, now) + c*T - now <= B*T``; it then stores the new TAT. A denial
writes nothing and waits exactly ``max(TAT, now) + c*T - now - B*T``.

``T`` is rarely a whole number of microseconds (3/second is 333,333.3 us), so
TAT is kept as an exact fraction ``tat_us + frac/n`` with ``T = d/n`` in lowest
terms: no rounding error accumulates, however long the run. All arithmetic
stays below 2**53, where the Lua twin's doubles are exact too.

Burst: ``B`` requests back to back from rest (``tau / T + 1`` in the classic
notation, with ``tau = (B - 1) * T``), then one every ``T``.

Effective window (``refill_after_us``): once ``remaining`` more are used, the
TAT stands less than one ``T`` short of ``now + B*T``, and the next unit fits
when it has drifted that last part: at most one emission interval (exactly
one for a full bucket), however far the key is from full.
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome, Step, new_outcome
from ratewarden.algorithms._bucket import params

__all__ = ["NAME", "State", "check", "params"]

NAME = "gcra"

#: ``(tat_us, frac)``: the TAT is ``tat_us + frac / n`` microseconds, ``0 <= frac < n``.
State = tuple[int, int]


def check(params: tuple[int, ...], state: State | None, now_us: int, cost: int) -> Step:
    n, d, capacity = params
    if state is None or state[0] < now_us:
        tat_us, frac = now_us, 0
    else:
        tat_us, frac = state
    # Distances from now, in units of 1/n microsecond.
    ahead = (tat_us - now_us) * n + frac
    room = capacity * d
    after = ahead + cost * d
    if cost > capacity or after > room:
        remaining = max(room - ahead, 0) // d
        retry_after_us = NEVER if cost > capacity else -(-(after - room) // n)
        # The next unit fits once the TAT, moved by the remaining units, is one T from full.
        refill_us = -(-(ahead + (remaining + 1) * d - room) // n)
        outcome = new_outcome(
            Outcome, (False, remaining, -(-ahead // n), retry_after_us, 0, refill_us)
        )
        return outcome, state, 0
    total = frac + cost * d
    # ceil(after / n), inlined (as below): this runs on every decision.
    reset_after_us = -(-after // n)
    left = room - after
    # As above, with the TAT at after: (after + (remaining + 1) * d - room) is d - left % d.
    refill_us = -(-(d - left % d) // n)
    outcome = new_outcome(Outcome, (True, left // d, reset_after_us, 0, 0, refill_us))
    return outcome, (tat_us + total // n, total % n), reset_after_us
