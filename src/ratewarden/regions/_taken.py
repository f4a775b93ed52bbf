"""The weights a region has taken, and how a rebalance round moves them: "shrink first, grow
after", so that traffic shares stay within the limit while regions disagree.

A region enforces the smaller of two allowances: that of its *anchor* (weights every region
is known to enforce no more than) and that of its *current* weights (what traffic asks for).
Both are tagged with the interval they were computed for (0: the static shares). At the end
of each round a region publishes this pair (``Taken``), its "taken" weights of that interval.

A round that reads every region's demand and every region's taken pair of the interval
before moves to the pair ``(anchor, new weights)``, where the anchor is the newest weights
found in every region's pair (``settle``). Every region that moves reads the same pairs and
picks the same anchor; a region that keeps its pair (it could not read a peer) has that
anchor in its pair too. So every region enforces at most its allowance under one common
anchor, and ``split_allowances`` of one set of weights sums to exactly the limit: the
allowances never add up to more than the limit, whoever keeps and whoever moves. A region
whose share shrinks does so at once; one whose share grows waits until every region has
taken the new weights, one interval later (longer while a region cannot read its peers).

Regions given different shares (a rolling change of the configuration, a region restarted
after its published weights expired) have pairs with no weights in common: nothing is safe to
move to, and each region's own shares would add up to more than the limit. So a region that
reads such pairs also enforces at most its allowance under every weights found in them (the
*floor*, ``Taken.floor``, kept to itself): the sum of each region's smallest allowance is at
most the sum under any one of those weights, the limit. A round that read every region then
moves every region to the same new weights (``disagree``), so they agree again a round later.

Pure: no I/O. The quotas (``_quotas``) keep a ``Taken`` and call these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.regions._bound import check_weights, split_allowances

__all__ = ["Taken", "Weights", "decode", "disagree", "settle"]


@dataclass(frozen=True, slots=True)
class Weights:
    """Weights per region (exact), tagged with the interval they were computed for."""

    interval: int
    weights: tuple[tuple[str, int | float], ...]

    @classmethod
    def of(cls, interval: int, weights: Mapping[str, int | float]) -> Weights:
        """``weights`` (validated) for ``interval``."""
        check_weights(weights)
        return cls(interval, tuple(weights.items()))

    @property
    def key(self) -> tuple[int, tuple[tuple[str, Fraction], ...]]:
        """The same weights of the same interval, whatever the order of the regions."""
        return self.interval, tuple(sorted(check_weights(dict(self.weights)).items()))

    def allowance(self, limit: int, region: str) -> int:
        """``region``'s part of ``limit`` under these weights (``split_allowances``)."""
        return split_allowances(limit, dict(self.weights))[region]


@dataclass(frozen=True, slots=True)
class Taken:
    """What a region enforces: at most its allowance under ``anchor``, under ``current``, and
    under each of ``floor`` (weights of regions that disagreed: not published)."""

    anchor: Weights
    current: Weights
    floor: tuple[Weights, ...] = ()

    @classmethod
    def static(cls, shares: Mapping[str, int | float]) -> Taken:
        """The static shares, as both anchor and current weights (interval 0)."""
        weights = Weights.of(0, shares)
        return cls(weights, weights)

    def allowance(self, limit: int, region: str) -> int:
        """``region``'s allowance of ``limit``: the smaller of its two splits."""
        current = self.current.allowance(limit, region)
        if self.anchor != self.current:
            current = min(self.anchor.allowance(limit, region), current)
        for weights in self.floor:
            current = min(weights.allowance(limit, region), current)
        return current

    @property
    def pair(self) -> Taken:
        """The pair as published: without the floor."""
        return Taken(self.anchor, self.current)

    def encode(self) -> str:
        """As published: JSON (a float's text reads back as the same float); not the floor."""
        return json.dumps([[w.interval, list(w.weights)] for w in (self.anchor, self.current)])


def decode(text: str) -> Taken | None:
    """A published ``Taken``; None for anything that is not one (a peer to count as missing)."""
    try:
        anchor, current = (
            Weights.of(interval, {region: weight for region, weight in weights})
            for interval, weights in json.loads(text)
        )
    except (ValueError, TypeError, ConfigurationError):
        return None
    if not isinstance(anchor.interval, int) or not isinstance(current.interval, int):
        return None
    return Taken(anchor, current)


def _common(pairs: Sequence[Taken]) -> dict[Any, Weights]:
    """The weights found in every one of ``pairs``, by key."""
    common = {pairs[0].anchor.key: pairs[0].anchor, pairs[0].current.key: pairs[0].current}
    for pair in pairs[1:]:
        found = {pair.anchor.key, pair.current.key}
        common = {key: weights for key, weights in common.items() if key in found}
    return common


def settle(taken: Mapping[str, Taken], new: Weights) -> tuple[Taken, tuple[str, ...]] | None:
    """The pair to move to from every region's taken pair of the interval before, and the
    regions held back (still on older current weights than the newest among them); None
    when no weights are common to every pair (nothing is safe to move to: keep the pair)."""
    pairs = list(taken.values())
    common = _common(pairs)
    if not common:
        return None
    anchor = common[max(common)]
    newest = max(pair.current.interval for pair in pairs)
    held = tuple(region for region, pair in taken.items() if pair.current.interval < newest)
    return Taken(anchor, new), held


def disagree(
    taken: Mapping[str, Taken], region: str, before: Taken, new: Weights | None
) -> tuple[Taken, tuple[str, ...]]:
    """What a region enforces once the pairs it read (``taken``, which have no weights in common)
    show regions with other shares, and those regions: the ones whose pair shares no weights
    with ``region``'s (its published pair, else ``before``), or else every one whose pair
    differs from it.

    The floor becomes every weights in ``taken``; with ``new`` (a round that read every region:
    they all read the same pairs and reach the same weights) the region moves to ``new`` as
    both anchor and current, under that floor, so that every region agrees a round later.
    Without it (a region could not be read) it keeps its pair, under the floor it had and
    the one found."""
    own = taken.get(region, before.pair)
    mine = {own.anchor.key, own.current.key}
    apart = [r for r, p in taken.items() if not mine & {p.anchor.key, p.current.key}]
    if not apart:
        apart = [r for r, p in taken.items() if p != own]
    found = {w.key: w for pair in taken.values() for w in (pair.anchor, pair.current)}
    if new is not None:
        return Taken(new, new, tuple(found[key] for key in sorted(found))), tuple(sorted(apart))
    found.update((w.key, w) for w in before.floor)
    floor = tuple(found[key] for key in sorted(found))
    return Taken(before.anchor, before.current, floor), tuple(sorted(apart))
