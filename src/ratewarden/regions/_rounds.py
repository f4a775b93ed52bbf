"""What a reconciled budget computes without a store: its share, its global rates (one, or
a layered limit's), the Decision a hit's reply makes, and the values a round reads and reports.

Pure: ``Reconciler`` (``_reconcile.py``) calls these from its flows, so the
blocking and the asyncio budgets compute everything here once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from ratewarden.checks import check_rates
from ratewarden.decision import Decision, layered_decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions._bound import _seconds_us, check_weights, overshoot_bound
from ratewarden.regions._gcounter import check_region

__all__ = [
    "PeerView",
    "SyncReport",
    "budget_decision",
    "capped_decision",
    "check_regions",
    "global_rates",
    "holds",
    "overshoot",
    "own_share",
    "round_error",
    "shares",
    "silent_peers",
    "timing",
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
    #: Each answering peer's published regions (None if it published none).
    configs: tuple[tuple[str, tuple[str, ...] | None], ...] = ()


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
    #: Peers that run with other regions than this one, held at their whole budget too.
    differing: tuple[str, ...] = ()


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


def global_rates(caller: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
    """The global Rates of a hit (one, or the layers of a layered limit), each within what
    reconciliation computes exactly, no two alike."""
    try:
        found = check_rates(rates)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{caller} takes a global Rate, or a list of them for layered limits, per hit: {exc}"
        ) from None
    seen: set[tuple[int, int]] = set()
    for rate in found:
        if rate.limit > _MAX_LIMIT or rate.period_us < _MIN_PERIOD_US:
            raise ConfigurationError(
                f"global rate {rate} is out of range for reconciliation: the limit must be at "
                f"most {_MAX_LIMIT:,} and the period at least 1 ms"
            )
        if (rate.limit, rate.period_us) in seen:
            raise ConfigurationError(
                f"{caller}: global rates {rates!r} give {rate.limit} per {rate.period_us} us "
                "twice; a layered limit names each (limit, period) once"
            )
        seen.add((rate.limit, rate.period_us))
    return found


def budget_decision(reply: Sequence[int], rates: Sequence[Rate], cost: int) -> Decision:
    """The budget script's ``[allowed, then per layer: own, cap, reset_us]`` as the hit's
    Decision: with one rate, that rate's; with several, combined as every layered
    decision is (``layered_decision``: the binding layer speaks for it, ``layers`` has
    each). A layer that would have admitted, in a hit another layer denied, shows its
    count as it was kept (nothing charged)."""
    allowed = bool(reply[0])
    if len(rates) == 1:
        return _layer(allowed, reply[1:4], rates[0], cost)
    layers = []
    for i, rate in enumerate(rates):
        own, cap, reset_us = reply[3 * i + 1 : 3 * i + 4]
        layers.append(_layer(allowed or own + cost <= cap, (own, cap, reset_us), rate, cost))
    return layered_decision(layers, cost)


def capped_decision(
    capped: Decision, reply: Sequence[int], rates: Sequence[Rate], cost: int
) -> Decision:
    """A hit the region's rate cap denied, as a Decision of the global ``rates`` (one layer
    each, in their order, combined as ``budget_decision`` combines them), from ``capped``
    (the cap's Decision) and the budget script's reply for cost 0 (what each budget holds).

    A layer whose budget had room for ``cost`` is denied by the cap: its ``retry_after`` is
    the cap's wait. A layer whose budget had none waits for its window's end (``_layer``),
    or the cap's wait if longer. ``remaining`` and ``reset_after`` are the budget's."""
    layers = []
    for i, rate in enumerate(rates):
        own, cap, reset_us = reply[3 * i + 1 : 3 * i + 4]
        layer = _layer(own + cost <= cap, (own, cap, reset_us), rate, cost)
        wait = max(capped.retry_after, 0.0 if layer.allowed else layer.retry_after)
        layers.append(replace(layer, allowed=False, retry_after=wait))
    if len(layers) == 1:
        return layers[0]
    return layered_decision(layers, cost)


def _layer(allowed: bool, counts: Sequence[int], rate: Rate, cost: int) -> Decision:
    """One layer's Decision from its ``(own, cap, reset_us)``."""
    own, cap, reset_us = counts
    reset_after = reset_us / 1_000_000
    retry_after = 0.0 if allowed else (math.inf if cost > rate.limit else reset_after)
    return Decision(
        allowed=allowed,
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
    view: PeerView,
    silent: Sequence[str],
    region_shares: Mapping[str, Fraction],
    whole: Sequence[str] = (),
) -> list[list[tuple[int, str, int, int]]]:
    """Per member of ``view``, the merge's holds: each silent peer's hash window and cap (-1
    when it has none; a view made by hand without ``budgets`` has none) and the default cap
    its share of the member's limit gives it; for a peer of ``whole`` (one that runs with
    other regions, whose share here is not its own), the whole limit."""
    held: list[list[tuple[int, str, int, int]]] = []
    budgets = view.budgets or tuple(() for _ in view.states)
    for (member, _), found in zip(view.states, budgets, strict=True):
        limit = int(member.split(":", 1)[0])
        seen = {peer: (window, cap) for window, peer, cap in found}
        member_holds = []
        for peer in silent:
            window, cap = seen.get(peer, (-1, -1))
            share = region_shares[peer]
            default = limit if peer in whole else limit * share.numerator // share.denominator
            member_holds.append((window, peer, cap, default))
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


def timing(
    caller: str, region_rates: Mapping[str, Rate], sync_interval: object, replication_lag: object
) -> tuple[int, int]:
    """A budget's ``bound`` and its ``replication_lag`` in microseconds, once both intervals
    are checked (a ConfigurationError naming ``caller`` and the parameter if not)."""
    try:
        lag_us = _seconds_us("replication_lag", replication_lag, zero_ok=True)
        bound = overshoot_bound(region_rates, sync_interval, replication_lag)  # type: ignore[arg-type]
    except ConfigurationError as exc:
        raise ConfigurationError(f"{caller}: {exc}") from None
    return bound, lag_us


#: The tail of a store error's words that speaks of a hit's failure mode, which a round has none of.
_HIT_TAIL = re.compile(
    r"[;:]? *(the decision may or may not have been applied: )?the failure mode decides what to do$"
)


def round_error(exc: BaseException) -> str:
    """``exc``'s words as a round's log line says them: without those about a hit's failure
    mode (a round has none: it leaves the cap as it was)."""
    return _HIT_TAIL.sub("", str(exc))
