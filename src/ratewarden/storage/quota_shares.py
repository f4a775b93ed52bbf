"""One round of an RLQS bucket's shares over the fleet's demand: the ``quota_shares`` op.

Several ``ratewarden serve`` replicas serve the Envoys of one bucket. Each keeps its own
streams; what they share is one hash per bucket in the store: per member (one Envoy
stream on one replica) its demand, and the share it was last sent with the time until
which its Envoy may enforce it. A replica's round of the bucket is one atomic step
(``lua/quota_shares.lua``, or ``run`` under the memory store's lock): it records its
members' demands (and weights), reads every member's, splits the limit fairly over all
of them (by demand, or weighted max-min fair when the rule has weights:
``shares.split``'s two ways), and gives its own members their fair part, never more than
the limit less what the other members still hold. So the tokens per fill held fleet-wide
never add up to more than the limit, and their capacity never to more than ``max(burst,
holders)``, whatever the replicas' rounds interleave (docs/rlqs.md, the
bound for several replicas). With Redis, ``now`` is Redis ``TIME``: one clock for
every replica.

A budget of changes (``--rlqs-change-rounds``): Envoy starts a changed token bucket full,
so a round that changes shares hands out their capacity afresh. The replica tells the
round what its members hold now and what its changes spent over its last rounds; a change
that does not fit in what is left of ``max(burst, members)`` keeps the member on the share
it holds (``hold_back``, the same arithmetic as one process's).

``quota_shares_op`` plans the op (``apply`` runs it on any store); ``run`` is the pure
twin of the script (the same ARGV, the same reply, in the same floating point).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.storage._ops import Op, record_key

__all__ = ["FleetRound", "give_each_a_token", "hold_back", "quota_shares_op", "run"]

_SCRIPT = "quota_shares"
#: Most milli-requests per fill interval a demand counts as (doubles stay exact).
MAX_DEMAND = 10**12
#: Largest weight a member may have (the config's ``rlqs_weights`` bound).
MAX_WEIGHT = 1_000_000

#: A member's entry: (demand, demand_until_us, tokens, burst, held_until_us, weight).
Entry = tuple[int, int, int, int, int, int]
Write = tuple[int, Any, int]
#: A share as the op sees it: (tokens per fill, capacity); (0, 0) is none.
Pair = tuple[int, int]


@dataclass(frozen=True, slots=True)
class FleetRound:
    """A round's reply: members with a demand fleet-wide, the tokens the other members
    hold, the capacity this round handed out in changed shares, the changes it held back,
    and each of this replica's members' ``(tokens, burst)``, in the order asked."""

    members: int
    held_by_others: int
    spent: int
    held_back: int
    shares: tuple[Pair, ...]

    @classmethod
    def of(cls, reply: Sequence[int]) -> FleetRound:
        pairs = tuple((int(reply[i]), int(reply[i + 1])) for i in range(4, len(reply), 2))
        return cls(int(reply[0]), int(reply[1]), int(reply[2]), int(reply[3]), pairs)


def quota_shares_op(
    prefix: str,
    bucket: str,
    tokens: int,
    burst: int,
    hold_us: int,
    members: Sequence[tuple[str, int]],
    departed: Sequence[str] = (),
    weights: Sequence[int] | None = None,
    holding: Sequence[Pair] | None = None,
    spent: int | None = None,
) -> Op:
    """The round of ``bucket`` (one domain's bucket id, as text) for this replica's
    ``members`` (``(member id, demand)``, demand in milli-requests per fill interval) and
    its ``departed`` members (closed streams: their demand goes, their share stays held).
    ``weights``, one per member (1 to ``MAX_WEIGHT``), make the split weighted max-min
    fair over every member's weight; None splits by demand. ``holding``, one per member,
    is the share it holds now (``(0, 0)``: none; None: none for all), and ``spent`` the
    capacity this replica's changed shares handed out within its change window: the round
    changes shares for at most ``max(burst, members) - spent`` more (None: no budget)."""
    if tokens < 0 or burst < 0 or hold_us < 1 or (spent is not None and spent < 0):
        raise ConfigurationError(
            f"tokens {tokens}, burst {burst} and spent {spent} must be >= 0, hold_us {hold_us} >= 1"
        )
    if holding is not None and (
        len(holding) != len(members) or any(t < 0 or b < 0 for t, b in holding)
    ):
        raise ConfigurationError(f"holding {holding!r}: one (tokens, burst) >= 0 per member")
    if weights is not None and (
        len(weights) != len(members) or not all(1 <= w <= MAX_WEIGHT for w in weights)
    ):
        raise ConfigurationError(f"weights {weights!r}: one per member, 1 to {MAX_WEIGHT}")
    weighted = weights is not None
    args: list[int | str] = ["", tokens, burst, hold_us, int(weighted), len(members)]
    args.append(-1 if spent is None else spent)
    for index, (member, demand) in enumerate(members):
        weight = weights[index] if weights is not None else 1
        held = holding[index] if holding is not None else (0, 0)
        args += [_member(member), max(0, min(MAX_DEMAND, int(demand))), weight, *held]
    args += [_member(member) for member in departed]
    return Op(_SCRIPT, (record_key(prefix, bucket, "rlqs", "shares"),), tuple(args), run)


def give_each_a_token(burst: list[int]) -> None:
    """Every holder needs one token of capacity to admit anything: each holder of none
    takes one from the largest (the first of equals) while it has more than one, so the
    sum stays put while there are tokens to move (``shares.split`` and this op's twin)."""
    for slot, part in enumerate(burst):
        if part == 0:
            largest = max(range(len(burst)), key=lambda i: (burst[i], -i))
            if burst[largest] > 1:
                burst[largest] -= 1
            burst[slot] = 1


def hold_back(
    targets: Sequence[Pair],
    holding: Sequence[Pair],
    room: int | None,
    tokens: int,
    burst: int,
    held_burst: int,
    holders: int,
) -> tuple[list[Pair], int]:
    """What a round sends under a budget of changes, and the capacity its changes hand out.

    ``targets`` are the round's shares, ``holding`` what each member holds now ((0, 0):
    none). A change to a non-empty share costs its capacity (Envoy starts it full); going
    to none, or staying, costs nothing. When the changes cost more than ``room`` (None: no
    limit), a member whose change does not fit keeps what it holds, and a change is made
    only while the shares still fit beside the others': at most ``tokens`` tokens per fill,
    and with the others' ``held_burst`` capacity over ``holders`` holders, at most
    ``max(burst, holders + holders here)`` of capacity. Shrinking changes go first (they
    make room), then the cheapest (ties: the earlier member). When what the members hold
    no longer fits at all (a reload lowered the budget), every change is made: the sums
    first. ``lua/quota_shares.lua`` mirrors it.
    """
    holding = [(t, b) if t > 0 else (0, 0) for t, b in holding]
    changed = [i for i, share in enumerate(targets) if share[0] > 0 and share != holding[i]]
    cost = sum(targets[i][1] for i in changed)
    if room is None or cost <= room:
        return list(targets), cost
    chosen = [(0, 0) if share[0] == 0 else holding[i] for i, share in enumerate(targets)]
    sum_t = sum(share[0] for share in chosen)
    sum_b = sum(share[1] for share in chosen if share[0] > 0)
    count = sum(1 for share in chosen if share[0] > 0)

    def fits(sum_t: int, sum_b: int, count: int) -> bool:
        return sum_t <= tokens and held_burst + sum_b <= max(burst, holders + count)

    if not fits(sum_t, sum_b, count):
        return list(targets), cost
    spent = 0
    for i in sorted(changed, key=lambda i: (targets[i][0] > holding[i][0], targets[i][1], i)):
        (t, b), (was_t, was_b) = targets[i], chosen[i]
        if spent + b > room:
            continue
        was_b = was_b if was_t > 0 else 0
        new_t, new_b, new_count = sum_t - was_t + t, sum_b - was_b + b, count + (was_t == 0)
        if fits(new_t, new_b, new_count):
            chosen[i] = targets[i]
            sum_t, sum_b, count, spent = new_t, new_b, new_count, spent + b
    return chosen, spent


def _member(name: str) -> str:
    if not name or " " in name or not name.isascii():
        raise ConfigurationError(f"member {name!r} must be non-empty ASCII without spaces")
    return name


def _apportion(total: float, weights: Sequence[float]) -> list[int]:
    """``lua/quota_shares.lua``'s ``apportion``: largest remainder, in doubles."""
    whole = 0.0
    for weight in weights:
        whole += weight
    if total <= 0 or whole <= 0:
        return [0] * len(weights)
    parts: list[int] = []
    rest: list[float] = []
    used = 0
    for weight in weights:
        quota = float(total) * weight / whole
        part = math.floor(quota)
        parts.append(part)
        rest.append(quota - part)
        used += part
    order = sorted(range(len(weights)), key=lambda i: (-rest[i], i))
    for index in order[: min(int(total) - used, len(weights))]:
        parts[index] += 1
    return parts


def _by_demand(fleet_limit: float, asked_by: Sequence[float]) -> list[float]:
    """``lua/quota_shares.lua``'s split by demand (``shares.by_demand``, scaled by ``n``)."""
    n = len(asked_by)
    asked = 0.0
    for value in asked_by:
        asked += value
    weights: list[float] = []
    for value in asked_by:
        if asked == 0:
            weights.append(1.0)
        elif asked <= fleet_limit:
            weights.append(float(n) * value + (fleet_limit - asked))
        else:
            weights.append(value)
    return weights


def _by_weight(
    fleet_limit: float, asked_by: Sequence[float], weigh: Sequence[float]
) -> list[float]:
    """``lua/quota_shares.lua``'s weighted max-min fair split (``shares.by_weight``)."""
    n = len(asked_by)
    asked = whole = 0.0
    for i in range(n):
        asked += asked_by[i]
        whole += weigh[i]
    if asked == 0:
        return list(weigh)
    if asked <= fleet_limit:
        return [asked_by[i] + (fleet_limit - asked) * weigh[i] / whole for i in range(n)]
    parts = [0.0] * n
    left = fleet_limit
    order = sorted(range(n), key=lambda i: (asked_by[i] / weigh[i], i))
    for place, index in enumerate(order):
        if asked_by[index] * whole > left * weigh[index]:
            for rest in order[place:]:
                parts[rest] = left * weigh[rest] / whole
            break
        parts[index] = asked_by[index]
        left -= asked_by[index]
        whole -= weigh[index]
    return parts


def run(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[list[int], list[Write]]:
    """The reply of ``quota_shares.lua`` for these ARGV and the bucket's state, and its write."""
    limit, burst_limit, hold, weighted, k, spent = (int(args[i]) for i in range(1, 7))
    mine = [str(args[7 + 5 * i]) for i in range(k)]
    demand = [int(args[8 + 5 * i]) for i in range(k)]
    weight = [int(args[9 + 5 * i]) for i in range(k)]
    had = [(int(args[10 + 5 * i]), int(args[11 + 5 * i])) for i in range(k)]
    departed = [str(name) for name in args[7 + 5 * k :]]
    entries: dict[str, Entry] = dict(states[0] or {})
    for name in mine:
        entries.pop(name, None)
    for name in departed:
        if name in entries and name not in mine:
            entries[name] = (entries[name][0], 0, *entries[name][2:])
    others: list[str] = []
    held_t = held_b = holders = 0
    for name, entry in list(entries.items()):
        if entry[1] <= now and entry[4] <= now:
            del entries[name]
            continue
        if entry[1] > now:
            others.append(name)
        if entry[4] > now and entry[2] > 0:
            held_t += entry[2]
            held_b += entry[3]
            holders += 1
    others.sort()

    asked_by = [float(value) for value in demand] + [float(entries[name][0]) for name in others]
    # An entry written before weights were stored counts as weight 1, as in the script.
    weigh = [float(value) for value in weight]
    weigh += [float(entries[name][5] if len(entries[name]) > 5 else 1) for name in others]
    n = len(asked_by)
    if weighted:
        weights = _by_weight(float(limit * 1000), asked_by, weigh)
    else:
        weights = _by_demand(float(limit * 1000), asked_by)
    fair = _apportion(limit, weights)
    holding = [i for i in range(n) if fair[i] > 0]
    fair_burst = _apportion(burst_limit, [weights[i] for i in holding])
    fair_t = sum(fair[:k])
    fair_b = sum(part for i, part in zip(holding, fair_burst, strict=True) if i < k)

    pool = max(0, min(fair_t, limit - held_t))
    tokens = _apportion(pool, weights[:k])
    ranked = sorted((i for i in range(k) if tokens[i] > 0), key=lambda i: (-weights[i], i))
    keep = len(ranked)
    while keep > 0 and max(burst_limit, holders + keep) - held_b < keep:
        keep -= 1
    for index in ranked[keep:]:
        tokens[index] = 0
    kept = [i for i in range(k) if tokens[i] > 0]
    room = max(keep, min(fair_b, burst_limit - held_b))
    burst = _apportion(room, [weights[i] for i in kept])
    give_each_a_token(burst)
    mine_b = [0] * k
    for slot, index in enumerate(kept):
        mine_b[index] = burst[slot]
    change_room = None if spent < 0 else max(burst_limit, n) - spent
    sent, spent_now = hold_back(
        list(zip(tokens, mine_b, strict=True)), had, change_room, limit - held_t, burst_limit,
        held_b, holders,
    )  # fmt: skip

    targets = zip(tokens, mine_b, strict=True)
    held_back = sum(1 for target, got in zip(targets, sent, strict=True) if target != got)
    reply = [n, held_t, spent_now, held_back]
    last = now
    for i, name in enumerate(mine):
        t, b = sent[i]
        held_until = now + hold if t > 0 else 0
        entries[name] = (demand[i], now + hold, t, b, held_until, weight[i])
        last = now + hold
        reply += [t, b]
    for entry in entries.values():
        last = max(last, entry[1], entry[4])
    return reply, [(0, entries, last)]
