"""Weighted fair shares of a pooled GCRA budget: the pure twin of ``fair_share.lua``.

Every tenant of a pool has a weight. A request of ``cost`` from tenant ``i`` is
admitted when both

- the pool's GCRA (the hard cap: rate ``P``) has room for ``cost``, and
- the tenant's own GCRA, at the same rate ``P`` and capacity, has room for
  ``ceil(cost * W / w_i)``, where ``W`` is the total weight of the tenants
  active in the last ``window_us`` (the tenant itself included).

A tenant's bucket at rate ``P`` charged ``W / w_i`` per unit admits
``P * w_i / W`` units per unit time: when every active tenant saturates, the
shares add up to exactly ``P`` and split by weight. A tenant that goes quiet
drops out of ``W`` after ``window_us`` and the others' shares grow to fill the
pool (work-conserving over idle tenants). A tenant is active once it asks,
admitted or not, so a denied tenant keeps its share.

A reserve is a hit that also writes a reservation record, which
``_gcra_multi.run``'s settle reads and refunds: the two states are kept as
``gcra_multi``'s axes are, ``(tat_us, frac, since_us, used)`` (a hit keeps them
too, so a settle after it bounds its refund by what the hit charged), and the
record is ``("r", ((cost, since, used, 1, 1), (charged, since, used, W, w)),
expires_us)``: each axis priced, so the settle charges the tenant's bucket
``ceil(actual * W / w)`` with the ``W`` of the reserve. A reserve whose record
is still there charges nothing again (a retried call).

ARGV (0-based): ``[0] now_us or ""  [1] cost  [2] n  [3] d  [4] capacity
[5] tenant  [6] weight  [7] window_us  [8] record ttl_us (a reserve)``; KEYS:
pool state, tenant state, the activity map (tenant -> ``(last_seen_us,
weight)``), and for a reserve the record.
Reply: ``{now, allowed, active_weight, charged, pool: 6 numbers, tenant: 6 numbers}``
(each GCRA outcome as ``storage/lua/_prelude.lua`` lists it); a reserve adds its
status: 0 denied, 1 charged, 2 already reserved under this id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratewarden.algorithms import gcra
from ratewarden.algorithms._base import Outcome, ceil_div
from ratewarden.algorithms._gcra_multi import busy_since, kept_refunds, used_since_rest

__all__ = ["run"]

#: ``(index into keys, state, absolute expiry in us)``
Write = tuple[int, Any, int]


def _numbers(outcome: Outcome) -> list[int]:
    return [int(outcome[0]), outcome[1], outcome[2], outcome[3], outcome[4], outcome[5]]


def _gcra(state: tuple[int, ...] | None) -> gcra.State | None:
    return None if state is None else (state[0], state[1])


def run(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[list[int], list[Write]]:
    """The reply of ``fair_share.lua`` for these ARGV and key states, and the writes it makes."""
    cost = int(args[1])
    params = (int(args[2]), int(args[3]), int(args[4]))
    tenant, weight, window = str(args[5]), int(args[6]), int(args[7])
    pool_state, tenant_state, seen = states[:3]
    reserving = len(states) > 3
    # an open record (a settled one is over: a reserve under its id is charged afresh)
    replayed = reserving and states[3] is not None and states[3][0] == "r"
    active = {name: entry for name, entry in (seen or {}).items() if entry[0] > now - window}
    active[tenant] = (now, weight)
    total = sum(entry[1] for entry in active.values())
    charged = ceil_div(cost * total, weight)
    asked = 0 if replayed else 1
    pool = gcra.check(params, _gcra(pool_state), now, cost * asked)
    mine = gcra.check(params, _gcra(tenant_state), now, charged * asked)
    allowed = pool[0].allowed and mine[0].allowed
    writes: list[Write] = [(2, active, now + window)]
    if allowed and not replayed:
        pool_at = (busy_since(pool_state, now), used_since_rest(pool_state, now) + cost)
        mine_at = (busy_since(tenant_state, now), used_since_rest(tenant_state, now) + charged)
        if cost > 0:
            pool_kept, mine_kept = kept_refunds(pool_state, now), kept_refunds(tenant_state, now)
            writes.append((0, (*pool[1], *pool_at, *pool_kept), now + pool[2]))
            writes.append((1, (*mine[1], *mine_at, *mine_kept), now + mine[2]))
        if reserving:
            expires = now + int(args[8])
            charges = ((cost, *pool_at, 1, 1), (charged, *mine_at, total, weight))
            writes.append((3, ("r", charges, expires), expires))
    pool_out = (
        pool[0]
        if allowed or not pool[0].allowed
        else gcra.check(params, _gcra(pool_state), now, 0)[0]
    )
    mine_out = (
        mine[0]
        if allowed or not mine[0].allowed
        else gcra.check(params, _gcra(tenant_state), now, 0)[0]
    )
    reply = [now, int(allowed), total, charged, *_numbers(pool_out), *_numbers(mine_out)]
    if reserving:
        reply.append(2 if replayed else int(allowed))
    return reply, writes
