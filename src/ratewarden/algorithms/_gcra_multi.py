"""GCRA over several axes with a cost per axis, plus refunds: the pure twin of ``gcra_multi.lua``.

A token budget limits one key on several axes at once (requests, tokens, input
tokens, ...), each a GCRA with its own rate, and charges each axis its own
cost. ``run`` takes exactly the ARGV the Lua script takes and returns exactly
its reply, so the memory store and Redis give identical answers and a
differential test compares them directly.

Three operations:

- ``reserve``: check every axis with its own cost and charge all or nothing.
  With a reservation record key it also writes ``("r", charges, expires)``
  there for ``ttl_us``, each charge being the axis cost and the busy period it
  was charged in. A reserve whose record is still open charges nothing again
  (a retried call); under a settled record's id it is charged afresh (a new request).
- ``settle``: move each axis back by ``(charged - actual)`` emission intervals,
  but only while the axis is still in the busy period the reservation was
  charged in, and never below now. Actual usage above the charge is charged too,
  up to an empty budget (never further into debt). The record becomes
  ``("s", expires)``, so a second settle refunds nothing.

- ``charge``: record usage that already happened, with no reservation (Envoy's
  charge on stream done): each axis takes its amount, up to an empty budget.

Why refunds are bounded: an axis' state is ``(tat_us, frac, since_us, used)``,
where ``since_us`` is when the axis last left rest (its TAT was at or behind
now and a charge moved it ahead) and ``used`` the units charged since then
(reservations, overruns, charges; refunds do not lower it). The axis must never
be behind an exact ledger that charges each reservation its actual usage at the
time it was admitted. Settling reservation R by ``x`` unused units moves that
ledger's TAT to ``max(TAT - x, M)``, where M is the TAT that the charges made
after R alone would give; M is at most ``now`` plus those charges, and they are
``used - used_R`` (``used_R``: ``used`` just after R was charged, kept in the
record), less the units given back since to reservations charged after R (the
ledger charges those their actual usage). So a settle moves the TAT back by at
most ``(cost - actual)`` units and never below ``now`` plus those. An axis keeps
its busy period's refunds as ``(position, units)`` pairs, a position being
``used`` just after that reservation was charged, at most ``REFUNDS_KEPT``; past
that the two closest together merge at the lower position, so a settle counts
fewer refunds after it, never more (without them, settling newest first gave back
half: each later reservation held the earlier ones back at its whole estimate).
Once the axis has rested, a record
whose ``since`` no longer matches refunds nothing: the rest gave its excess back
already. (Without the ``used`` bound a reservation's own unused units came back
in full even when the ledger had rested while the axis, holding them, had not:
1,000 tokens/min, 667 reserved at 0 s and 67 used, 600 reserved at 40 s, the first
settled, then 600 more admitted at 40 s: 1,200 in one instant.)

ARGV (0-based here, ``ARGV[i + 1]`` in Lua)::

    [0] now_us or ""   [1] "reserve" | "settle" | "charge"   [2] m axes   [3] record ttl_us
    [4 + 4i ...]       axis i: n, d, capacity, amount (cost, actual usage, or usage)

Axis state: ``(tat_us, frac, since_us, used, p1, r1, p2, r2, ...)``; record:
``("r", charges, expires_us)`` with a ``(cost, since_us, used)`` per axis, or
``("s", expires_us)``. A state or record written before ``used`` existed reads as
``used`` 0 (the bound is then not applied); a state without ``since_us`` (a fair
share's, written before it kept one) as busy since now; one without refund pairs as
having given none. A fair share's reservation (``_fair_share.run`` writes it) prices
each axis, ``(cost, since_us, used, p, q)``: its settle charges that axis
``ceil(amount * p / q)`` for the amount in ARGV (the tenant's bucket is charged
``W / w`` a unit).

KEYS: the m axis state keys, then the record key (optional for reserve).

Replies::

    reserve  {now, allowed, status, per axis: allowed, remaining, reset_us, retry_us, delay_us,
              refill_us}
             status 0 denied, 1 charged, 2 already reserved under this id (nothing charged)
    settle   {now, status, per axis: refunded units (negative for an overrun charged),
              then per axis the six numbers of a cost-0 check}
             status 0 no such reservation (expired or never made), 1 settled, 2 already settled
    charge   {now, 1, per axis: units charged, then per axis the six numbers of a cost-0 check}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratewarden.algorithms import gcra
from ratewarden.algorithms._base import Outcome, ceil_div

__all__ = ["RECORD_WIDTH", "Write", "busy_since", "kept_refunds", "run", "used_since_rest"]

#: Numbers per axis in ARGV after the four header values.
RECORD_WIDTH = 4

#: ``(index into keys, state, absolute expiry in us)``; an expiry <= now deletes the key.
Write = tuple[int, Any, int]

_Reply = list[int]


def _axes(args: Sequence[int | str]) -> list[tuple[tuple[int, int, int], int]]:
    count = int(args[2])
    found = []
    for i in range(count):
        base = 4 + RECORD_WIDTH * i
        n, d, capacity, amount = (int(v) for v in args[base : base + RECORD_WIDTH])
        found.append(((n, d, capacity), amount))
    return found


def _ahead(state: tuple[int, ...] | None, now: int, n: int) -> int:
    """Distance of the TAT ahead of now, in units of 1/n microsecond (0 when rested)."""
    if state is None or state[0] < now:
        return 0
    return (state[0] - now) * n + state[1]


def _gcra(state: tuple[int, ...] | None) -> gcra.State | None:
    return None if state is None else (state[0], state[1])


def busy_since(state: tuple[int, ...] | None, now: int) -> int:
    """When the axis left rest: kept while busy, ``now`` when a charge starts from rest."""
    if state is None or len(state) < 3 or _ahead(state, now, 1) == 0:
        return now
    return state[2]


def used_since_rest(state: tuple[int, ...] | None, now: int) -> int:
    """Units charged in the axis' current busy period (0 at rest, or in an older state)."""
    if state is None or len(state) < 4 or _ahead(state, now, 1) == 0:
        return 0
    return state[3]


#: Refunds an axis keeps in its busy period (``kept_refunds``).
REFUNDS_KEPT = 8


def kept_refunds(state: tuple[int, ...] | None, now: int) -> tuple[int, ...]:
    """The refunds an axis keeps in its busy period, flat: each settled reservation's
    position (``used`` just after it was charged) and the units given back, by position;
    none at rest or in a state written before they were kept."""
    if state is None or len(state) < 6 or _ahead(state, now, 1) == 0:
        return ()
    return tuple(state[4 : 4 + 2 * ((len(state) - 4) // 2)])


def _refunded_after(refunds: tuple[int, ...], position: int) -> int:
    """The units given back to reservations charged after ``position``."""
    return sum(refunds[i + 1] for i in range(0, len(refunds), 2) if refunds[i] > position)


def _noted(refunds: tuple[int, ...], position: int, units: int) -> tuple[int, ...]:
    """``refunds`` with ``units`` given back at ``position``, in order; past
    ``REFUNDS_KEPT`` pairs, the two adjacent pairs closest together become one at the
    lower position, so a later settle counts fewer refunds after it, never more."""
    pairs = [[refunds[i], refunds[i + 1]] for i in range(0, len(refunds), 2)]
    for pair in pairs:
        if pair[0] == position:
            pair[1] += units
            break
    else:
        pairs.append([position, units])
        pairs.sort(key=lambda pair: pair[0])
    if len(pairs) > REFUNDS_KEPT:
        best = min(range(len(pairs) - 1), key=lambda i: (pairs[i + 1][0] - pairs[i][0], i))
        pairs[best][1] += pairs.pop(best + 1)[1]
    return tuple(number for pair in pairs for number in pair)


def _numbers(outcome: Outcome) -> list[int]:
    return [int(outcome[0]), outcome[1], outcome[2], outcome[3], outcome[4], outcome[5]]


def _outcome_numbers(params: tuple[int, int, int], state: Any, now: int, cost: int) -> list[int]:
    return _numbers(gcra.check(params, _gcra(state), now, cost)[0])


def _reserve(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[_Reply, list[Write]]:
    axes = _axes(args)
    m = len(axes)
    has_record = len(states) > m
    if has_record and states[m] is not None and states[m][0] == "r":
        # an open reservation under this id: a retried call (a settled one is over)
        reply = [now, 1, 2]
        for i, (params, _) in enumerate(axes):
            reply.extend(_outcome_numbers(params, states[i], now, 0))
        return reply, []
    steps = [gcra.check(p, _gcra(states[i]), now, cost) for i, (p, cost) in enumerate(axes)]
    allowed = all(step[0].allowed for step in steps)
    reply = [now, int(allowed), int(allowed)]
    writes: list[Write] = []
    charges: list[tuple[int, int, int]] = []
    for i, ((params, cost), step) in enumerate(zip(axes, steps, strict=True)):
        outcome = step[0]
        if not allowed and outcome.allowed:
            # Nothing is charged: show the state actually kept.
            outcome = gcra.check(params, _gcra(states[i]), now, 0)[0]
        reply.extend(_numbers(outcome))
        if allowed:
            since = busy_since(states[i], now)
            used = used_since_rest(states[i], now)
            if cost > 0:
                used += cost
                kept = kept_refunds(states[i], now)
                writes.append((i, (*step[1], since, used, *kept), now + step[2]))
            charges.append((cost, since, used))
    if allowed and has_record:
        expires = now + int(args[3])
        writes.append((m, ("r", tuple(charges), expires), expires))
    return reply, writes


def _settle_axis(
    params: tuple[int, int, int], state: Any, now: int, charge: tuple[int, ...], actual: int
) -> tuple[int, Any, int]:
    """``(refunded units, new state, ttl_us)`` of one axis.

    ``charge`` is the record's ``(cost, since_us, used)`` for this axis (``used``
    absent in a record written before it existed).
    """
    n, d, capacity = params
    cost, charged_since = charge[0], charge[1]
    ahead = _ahead(state, now, n)
    since = busy_since(state, now)
    used = used_since_rest(state, now)
    refunds = kept_refunds(state, now)
    if actual <= cost:
        back = 0
        if ahead > 0 and since == charged_since:
            # Never below now plus what was charged after this reservation and not
            # given back since (see above).
            later = 0
            if len(charge) > 2:
                later = max(0, used - charge[2] - _refunded_after(refunds, charge[2]))
            back = min((cost - actual) * d, max(0, ahead - later * d))
        ahead -= back
        refunded = back // d
        if refunded > 0 and len(charge) > 2:
            refunds = _noted(refunds, charge[2], refunded)
    else:
        room = capacity * d
        extra = min((actual - cost) * d, max(0, room - ahead))
        ahead += extra
        refunded = -ceil_div(extra, d)
        used += -refunded
    if ahead == 0:
        return refunded, None, 0
    return refunded, (now + ahead // n, ahead % n, since, used, *refunds), ceil_div(ahead, n)


def _settle(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[_Reply, list[Write]]:
    axes = _axes(args)
    m = len(axes)
    record = states[m]
    if record is None or record[0] != "r" or len(record[1]) != m:
        status = 0 if record is None or record[0] == "r" else 2
        reply = [now, status, *([0] * m)]
        for i, (params, _) in enumerate(axes):
            reply.extend(_outcome_numbers(params, states[i], now, 0))
        return reply, []
    refunds: list[int] = []
    news: list[Any] = []
    writes: list[Write] = []
    for i, ((params, amount), charge) in enumerate(zip(axes, record[1], strict=True)):
        # a priced axis (a fair share's tenant): the amount in this axis' units
        actual = ceil_div(amount * charge[3], charge[4]) if len(charge) == 5 else amount
        refunded, state, ttl_us = _settle_axis(params, states[i], now, charge, actual)
        refunds.append(refunded)
        news.append(state)
        if refunded != 0:
            writes.append((i, state, now + ttl_us if state is not None else 0))
    writes.append((m, ("s", record[2]), record[2]))
    reply = [now, 1, *refunds]
    for i, (params, _) in enumerate(axes):
        reply.extend(_outcome_numbers(params, news[i], now, 0))
    return reply, writes


def _charge(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[_Reply, list[Write]]:
    axes = _axes(args)
    charged: list[int] = []
    writes: list[Write] = []
    outcomes: list[int] = []
    for i, (params, amount) in enumerate(axes):
        refunded, state, ttl_us = _settle_axis(params, states[i], now, (0, 0, 0), amount)
        charged.append(-refunded)
        if refunded != 0:
            writes.append((i, state, now + ttl_us))
        outcomes.extend(_outcome_numbers(params, state if refunded else states[i], now, 0))
    return [now, 1, *charged, *outcomes], writes


def run(args: Sequence[int | str], states: Sequence[Any], now: int) -> tuple[_Reply, list[Write]]:
    """The reply of ``gcra_multi.lua`` for these ARGV and key states, and the writes it makes."""
    if args[1] == "reserve":
        return _reserve(args, states, now)
    if args[1] == "charge":
        return _charge(args, states, now)
    return _settle(args, states, now)
