"""What a reconciled budget computes without a store: its share, its one global rate, the
Decision a hit's reply makes, and the values a round reads and reports.

Pure: ``Reconciler`` (``_reconcile.py``) calls these from its flows, so the
blocking and the asyncio budgets compute everything here once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions._bound import check_weights
from ratewarden.regions._gcounter import check_region

__all__ = [
    "PeerView",
    "SyncReport",
    "budget_decision",
    "check_regions",
    "holds",
    "one_rate",
    "overshoot",
    "own_share",
    "shares",
    "silent_peers",
]

_MAX_LIMIT = 10**12  # counts are written by Lua as %d of a double: exact far below 2**53
_MIN_PERIOD_US = 1_000
_EXACT = 2**53


@dataclass(frozen=True, slots=True)
class PeerView:
    """What one ``fetch`` read: per member (rate and key), the peers' (window, region, count);
    the peers that did not answer; each answering peer's last complete round (us, None if
    it never completed one); and per member, aligned with ``states``, each answering
    peer's (window, region, cap) from its own hash (-1 for what it does not have)."""

    started_us: int
    states: tuple[tuple[str, tuple[tuple[int, str, int], ...]], ...]
    failed: tuple[str, ...]
    rounds: tuple[tuple[str, int | None], ...] = ()
    budgets: tuple[tuple[tuple[int, str, int], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One round: keys merged, whether caps were recomputed, the worst overshoot seen."""

    keys: int
    complete: bool
    stale: bool
    failed: tuple[str, ...]
    overshoot: int
    #: Peers held at their whole budget: they answered, but completed no round lately.
    silent: tuple[str, ...] = ()


def own_share(
    region: str, region_rates: Mapping[str, Rate], weights: Mapping[str, int | float] | None
) -> Fraction:
    """``region``'s weight over the sum of the weights (by default, each region's rate cap
    in requests per second), refused when too long to compute exactly in Lua."""
    share = shares(region_rates, weights)[region]
    if share.numerator * _MAX_LIMIT >= _EXACT or share.denominator >= _EXACT:
        raise ConfigurationError(
            f"region {region!r}'s share {share} has too many digits to compute exactly; "
            "pass weights= with small whole numbers"
        )
    return share


def shares(
    region_rates: Mapping[str, Rate], weights: Mapping[str, int | float] | None
) -> dict[str, Fraction]:
    """Every region's weight over the sum of the weights (see ``own_share``)."""
    if weights is None:
        exact = {
            r: Fraction(rate.limit * 1_000_000, rate.period_us) for r, rate in region_rates.items()
        }
    else:
        if set(weights) != set(region_rates):
            raise ConfigurationError(
                f"weights name {sorted(weights)}; they must name exactly the regions "
                f"{sorted(region_rates)}"
            )
        exact = check_weights(weights)
    total = sum(exact.values())
    return {name: weight / total for name, weight in exact.items()}


def one_rate(caller: str, rates: Rate | Sequence[Rate]) -> Rate:
    """The one global Rate of a hit, within what reconciliation computes exactly."""
    found = (rates,) if isinstance(rates, Rate) else tuple(rates)
    if len(found) != 1 or not isinstance(found[0], Rate):
        raise ConfigurationError(
            f"{caller} takes exactly one global Rate per hit, got {rates!r}; "
            "layered limits across regions are not built"
        )
    rate = found[0]
    if rate.limit > _MAX_LIMIT or rate.period_us < _MIN_PERIOD_US:
        raise ConfigurationError(
            f"global rate {rate} is out of range for reconciliation: the limit must be at most "
            f"{_MAX_LIMIT:,} and the period at least 1 ms"
        )
    return rate


def budget_decision(reply: Sequence[int], rate: Rate, cost: int) -> Decision:
    """The budget script's ``[allowed, own, cap, reset_us]`` as the hit's Decision."""
    allowed, own, cap, reset_us = reply
    reset_after = reset_us / 1_000_000
    retry_after = 0.0 if allowed else (math.inf if cost > rate.limit else reset_after)
    return Decision(
        allowed=bool(allowed),
        limit=rate.limit,
        remaining=max(0, cap - own),
        reset_after=reset_after,
        retry_after=retry_after,
        rate=rate,
        cost=cost,
        # A window's budget: nothing more than remaining before it ends (a sync may
        # raise the cap sooner, but nothing here can promise that).
        refill_after=reset_after,
    )


def overshoot(view: PeerView, replies: Sequence[Sequence[int]]) -> int:
    """The largest ``merged total - limit`` over a round's merge replies (0 when within)."""
    worst = 0
    for (member, _), reply in zip(view.states, replies, strict=True):
        limit = int(member.split(":", 1)[0])
        worst = max(worst, reply[1] - limit)
    return worst


def silent_peers(view: PeerView, started_us: int, silence_us: int) -> tuple[str, ...]:
    """The peers of ``view`` that answered but completed no round in the ``silence_us``
    before the round started, counting from ``started_us`` (the budget's own start) for
    a peer that never completed one, or did so before."""
    since = view.started_us - silence_us
    return tuple(
        peer for peer, last in view.rounds if max(started_us, -1 if last is None else last) < since
    )


def holds(
    view: PeerView, silent: Sequence[str], region_shares: Mapping[str, Fraction]
) -> list[list[tuple[int, str, int, int]]]:
    """Per member of ``view``, the merge's holds: each silent peer's hash window and cap (-1
    when it has none; a view made by hand without ``budgets`` has none) and the default cap
    its share of the member's limit gives it."""
    held: list[list[tuple[int, str, int, int]]] = []
    budgets = view.budgets or tuple(() for _ in view.states)
    for (member, _), found in zip(view.states, budgets, strict=True):
        limit = int(member.split(":", 1)[0])
        seen = {peer: (window, cap) for window, peer, cap in found}
        member_holds = []
        for peer in silent:
            window, cap = seen.get(peer, (-1, -1))
            share = region_shares[peer]
            member_holds.append((window, peer, cap, limit * share.numerator // share.denominator))
        held.append(member_holds)
    return held


def check_regions(
    region: str, peers: Mapping[str, object], region_rates: Mapping[str, object]
) -> None:
    """Every name a region's, ``region`` not among its ``peers``, and a rate for each region."""
    for name in (*peers, *region_rates):
        check_region(name)
    if region in peers:
        raise ConfigurationError(f"peers name this region {region!r}; list only others")
    expected = {region, *peers}
    if set(region_rates) != expected:
        raise ConfigurationError(
            f"region_rates names {sorted(region_rates)}, but the regions are "
            f"{sorted(expected)}: give every region (this one and each peer) a rate"
        )
