"""The share arithmetic of the quota service: one rule's limit split between Envoys.

Pure: no clock, no I/O, no protobuf. ``quota.py`` calls it once a round per bucket.

A rule of ``L`` requests per ``P`` seconds becomes a ``Budget``: ``L`` tokens every
``P`` seconds for the whole fleet, and ``burst`` tokens the fleet may hold at once.
Each Envoy gets a ``Share``: an Envoy token bucket refilled with ``tokens_per_fill``
tokens every ``P`` seconds, holding at most ``max_tokens``. The shares of one round
add up: their ``tokens_per_fill`` sum to at most ``L`` (exactly ``L`` when anyone
asks), their ``max_tokens`` to at most ``max(burst, n)`` (``n`` the Envoys holding
a non-zero share, each of which needs at least one token to admit anything).

Split by demand, work-conserving (``by_demand``, a rule without ``rlqs_weights``): when
the Envoys together ask for no more than the limit, each gets what it asked and the
rest is split evenly (an Envoy that wakes up has headroom); when they ask for more,
the limit is split in proportion to what each asked, so an Envoy that asked for
nothing gets nothing.

Weighted max-min fair (``by_weight``, a rule with ``rlqs_weights``): under the limit,
each gets what it asked and the rest is split in proportion to the weights; over it,
water-filling: an Envoy asking less than its weighted fair part of what is left gets
what it asks, and the rest is split between the others in proportion to their
weights, so Envoys that all ask for more hold shares in proportion to their weights.
Both hand out the whole limit when anyone asks, so the sums below hold either way.

Integers throughout (Hamilton's largest remainder, ties to the earlier Envoy): what
Envoy enforces is whole tokens, and the sums must hold exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from ratewarden.limiter import give_each_a_token

__all__ = ["Budget", "Sent", "Share", "apportion", "by_demand", "by_weight", "split"]


@dataclass(frozen=True, slots=True)
class Budget:
    """What the whole fleet may admit for one bucket: ``tokens`` every ``fill_s`` seconds,
    ``burst`` of them at once."""

    tokens: int
    fill_s: int
    burst: int

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.fill_s < 1 or self.burst < 0:
            raise ValueError(f"{self!r}: tokens and burst must be >= 0, fill_s >= 1")

    @classmethod
    def of(cls, tokens: int, period_s: int, burst: int | None, interval_s: float) -> Budget:
        """The budget of ``tokens`` per ``period_s`` seconds.

        ``burst`` is the rule's bucket capacity when it has one (the bucket algorithms);
        a window algorithm has none, and then the fleet holds one round's worth of the
        rate, ``ceil(tokens * interval_s / period_s)``, at least 1: every new assignment
        starts full in Envoy, so the burst is paid again at each change (docs/rlqs.md).
        """
        if burst is None:
            burst = max(1, math.ceil(Fraction(tokens) * Fraction(interval_s) / period_s))
        return cls(tokens, period_s, burst if tokens else 0)


@dataclass(frozen=True, slots=True)
class Share:
    """One Envoy's part of a budget; ``tokens_per_fill`` 0 means it may admit nothing."""

    tokens_per_fill: int
    max_tokens: int

    @property
    def empty(self) -> bool:
        return self.tokens_per_fill == 0


NOTHING = Share(0, 0)


@dataclass(frozen=True, slots=True)
class Sent:
    """What a round sends: each member's share (by stream), the capacity its changed shares
    hand out afresh, how many changes the budget of changes held back, and whether the split
    was worked out in exact arithmetic (not the bucket's last one again, nor a lone member's)."""

    shares: dict[int, Share]
    spent: int = 0
    held_back: int = 0
    worked: bool = False


def apportion(total: int, weights: Sequence[Fraction]) -> list[int]:
    """``total`` whole units split in proportion to ``weights`` (largest remainder).

    The parts sum to ``total`` exactly unless every weight is 0, when they are all 0.
    """
    whole = sum(weights, Fraction(0))
    if total <= 0 or whole <= 0:
        return [0] * len(weights)
    quotas = [Fraction(total) * weight / whole for weight in weights]
    parts = [math.floor(quota) for quota in quotas]
    left = total - sum(parts)
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - parts[i]), i))
    for index in order[:left]:
        parts[index] += 1
    return parts


def by_demand(budget: Budget, demands: Sequence[Fraction]) -> list[Fraction]:
    """Each Envoy's part of the limit by its demand, as weights for ``apportion``.

    Under the limit: its demand plus an even part of the spare. Over it: its demand.
    Nobody asking: equal weights (a new bucket's first round).
    """
    if not demands:
        return []
    asked = sum(demands, Fraction(0))
    if asked == 0:
        return [Fraction(1)] * len(demands)
    if asked <= budget.tokens:
        spare = (budget.tokens - asked) / len(demands)
        return [demand + spare for demand in demands]
    return list(demands)


def by_weight(
    budget: Budget, demands: Sequence[Fraction], weights: Sequence[int]
) -> list[Fraction]:
    """Each Envoy's part of the limit, weighted max-min fair, in tokens per fill interval.

    Nobody asking: in proportion to the weights. Under the limit: its demand plus its
    weight's part of the spare. Over it: water-filling, the Envoys taken from the smallest
    demand per weight; one asking no more than its weight's part of what is left gets its
    demand, and once one asks more, it and every one after it get their weight's part.
    """
    if len(weights) != len(demands) or any(weight < 1 for weight in weights):
        raise ValueError(f"weights {weights!r}: one positive weight per demand")
    asked = sum(demands, Fraction(0))
    if asked == 0:
        return [Fraction(weight) for weight in weights]
    whole = sum(weights)
    if asked <= budget.tokens:
        spare = budget.tokens - asked
        return [
            demand + spare * weight / whole for demand, weight in zip(demands, weights, strict=True)
        ]
    parts = [Fraction(0)] * len(demands)
    left = Fraction(budget.tokens)
    order = sorted(range(len(demands)), key=lambda i: (demands[i] / weights[i], i))
    for place, index in enumerate(order):
        if demands[index] * whole > left * weights[index]:
            for rest in order[place:]:
                parts[rest] = left * weights[rest] / whole
            break
        parts[index] = demands[index]
        left -= demands[index]
        whole -= weights[index]
    return parts


def split(
    budget: Budget,
    demands: Sequence[Fraction],
    weights: Sequence[int] | None = None,
    most: int | None = None,
) -> list[Share]:
    """The shares of one round: ``demands[i]`` is Envoy ``i``'s recent demand in requests
    per ``budget.fill_s`` seconds (allowed plus denied, as reported); ``weights[i]`` its
    weight when the rule has ``rlqs_weights`` (None: split by demand). With ``most``, at
    most that many Envoys hold a share, those with the largest parts (the earlier of equals);
    the others get nothing this round, and their tokens stay unused."""
    given = by_demand(budget, demands) if weights is None else by_weight(budget, demands, weights)
    tokens = apportion(budget.tokens, given)
    holders = [i for i, part in enumerate(tokens) if part > 0]
    if most is not None and len(holders) > most:
        kept = set(sorted(holders, key=lambda i: (-given[i], i))[: max(0, most)])
        holders = [i for i in holders if i in kept]
    burst = apportion(budget.burst, [given[i] for i in holders])
    give_each_a_token(burst)  # so the sum stays at budget.burst while tokens can move
    shares = [NOTHING] * len(demands)
    for slot, index in enumerate(holders):
        shares[index] = Share(tokens[index], burst[slot])
    return shares
