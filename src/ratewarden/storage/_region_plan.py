"""What every region store shares, on Redis or in this process: key names and the budget's Ops.

``RegionPlan`` is the base of ``RegionBase`` (``_region_base.py``: ``RegionStore`` and
``AsyncRegionStore``, on Redis) and of ``MemoryRegionBase`` (``memory_regions.py``:
``MemoryRegionStore`` and its asyncio twin). It names a region's keys, plans the
budget's script as an ``Op`` carrying its pure twin (``_region_budget.run``), and
says how long the exchange keeps what it writes. Sans-I/O, and no redis import: the
memory stores run without the ``[redis]`` extra.

A *member*, ``<limit>:<period_us>:<key>``, names one (global rate, key) in the exchange.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from ratewarden.clock import Clock
from ratewarden.storage import _region_budget
from ratewarden.storage._keys import escape
from ratewarden.storage._ops import Op
from ratewarden.storage._region_budget import Entry, Hold

__all__ = [
    "DEMAND_INTERVALS",
    "DEMAND_TTL_S",
    "ROUND_TTL_S",
    "Entry",
    "Hold",
    "PeerRound",
    "RegionPlan",
    "decode_regions",
    "encode_regions",
    "member_of",
    "taken_field",
]

_SCRIPT = "region_budget"
#: A region's demand counts: the intervals kept, and how long the hash outlives a write.
DEMAND_INTERVALS = 4
DEMAND_TTL_S = 3600
#: How long a region's last complete round is kept (its time says how old it is).
ROUND_TTL_S = 3600


class PeerRound(NamedTuple):
    """What a round reads of one peer (``read_round``): when the peer last completed a
    round (us on its clock, None if it never did or it is forgotten), and per member its
    window hash's entries and (window, cap) (-1 for either it does not have); and the
    regions the peer runs with, as its last round published them (None if it published
    none: an older ratewarden, or none yet)."""

    last_round: int | None
    entries: list[list[Entry]]
    budgets: list[tuple[int, int]]
    regions: tuple[str, ...] | None = None


def encode_regions(regions: Sequence[str]) -> str:
    """The regions a budget runs with (its own and its peers'), as a round publishes them."""
    return json.dumps(sorted(regions))


def decode_regions(text: str | None) -> tuple[str, ...] | None:
    """What ``encode_regions`` wrote; None for nothing, or anything that is not a list of
    names (read as an older peer's: no set to compare)."""
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, list) or not all(isinstance(name, str) for name in found):
        return None
    return tuple(found)


def taken_field(interval: int) -> str:
    """The field of a region's demand hash that holds the weights it took for ``interval``
    (``RegionalQuota``'s rounds); its demand of an interval is the field ``<interval>``."""
    return f"t:{interval}"


def member_of(member: str) -> tuple[int, int, str]:
    """A member's ``(limit, period_us, key)``."""
    limit, period_us, key = member.split(":", 2)
    return int(limit), int(period_us), key


class RegionPlan:
    """A region store's names and the budget's Ops, whatever holds its state."""

    #: Where the store keeps a region's state, as its errors say it: "on Redis" or "in
    #: this process". Stores kept apart cannot read each other's counts.
    kept: ClassVar[str]
    prefix: str
    clock: Clock

    def budget_key(self, member: str) -> str:
        """The window hash of ``member`` (``<limit>:<period_us>:<key>``)."""
        limit, period_us, key = member_of(member)
        return f"{self.prefix}:{{{escape(key)}}}:region:{limit}:{period_us}"

    def budget_hit(self, member: str, region: str, cost: int, default_cap: int) -> Op:
        """Admit ``cost`` for ``region`` iff its count stays within its cap; the reply is
        ``[allowed, own count, cap, microseconds until the window ends]``."""
        return self.budget_hit_layers(((member, default_cap),), region, cost)

    def budget_hit_layers(self, layers: Sequence[tuple[str, int]], region: str, cost: int) -> Op:
        """``budget_hit`` over the layers of a layered limit, each ``(member, default cap)``,
        all members of one key: ``cost`` is admitted iff every layer's count stays within
        its cap, and then charged to every layer (all or nothing). The reply is
        ``[allowed, then per layer: own count, cap, microseconds until its window ends]``."""
        (first, first_cap), *more = layers
        args: list[int | str] = ["", "hit", member_of(first)[1], region, cost, first_cap]
        for member, default_cap in more:
            args.extend((member_of(member)[1], default_cap))
        keys = tuple(self.budget_key(member) for member, _ in layers)
        return Op(_SCRIPT, keys, tuple(args), _region_budget.run)

    def budget_merge(
        self,
        member: str,
        region: str,
        share: tuple[int, int],
        recompute: bool,
        entries: Sequence[Entry],
        holds: Sequence[Hold] = (),
    ) -> Op:
        """Merge the peers' ``entries`` (max per region, this window's only) and, if
        ``recompute``, set the cap to own + ``share`` of what is left of the limit once
        each of ``holds`` (silent peers) has its whole budget; the reply is
        ``[window, merged total, own count, cap or -1]``."""
        limit, period_us, _ = member_of(member)
        args: list[int | str] = ["", "merge", period_us, region, limit, *share]
        args.append("1" if recompute else "0")
        args.append(len(holds))
        for hold in holds:
            args.extend(hold)
        for entry in entries:
            args.extend(entry)
        return Op(_SCRIPT, (self.budget_key(member),), tuple(args), _region_budget.run)

    def _active_key(self, region: str) -> str:
        return f"{self.prefix}:regions:active:{region}"

    def _round_key(self, region: str) -> str:
        return f"{self.prefix}:regions:round:{region}"

    def _config_key(self, region: str) -> str:
        """The regions ``region`` runs with (``encode_regions``), written by its rounds."""
        return f"{self.prefix}:regions:config:{region}"

    def _demand_key(self, region: str) -> str:
        return f"{self.prefix}:regions:demand:{region}"
