"""GCounter: a grow-only counter per region, merged by max (a state-based CRDT).

Each region only ever increments its own entry; a merge takes, for every
region, the larger of the two entries. The merge is commutative, associative
and idempotent, so regions can exchange states in any order, any number of
times, through any path (directly or by gossip), and still agree once they
have seen the same increments. The counter's value is the sum of the entries.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ratewarden.errors import ConfigurationError

__all__ = ["GCounter"]


def check_region(region: object) -> str:
    """A region name: a non-empty string without ``:``, which the key schema uses as a
    separator, nor whitespace or control characters (names go into keys and log lines)."""
    if not isinstance(region, str) or not region or ":" in region or region != region.strip():
        raise ConfigurationError(
            f"region name {region!r} must be a non-empty string without ':' or surrounding spaces"
        )
    for at, char in enumerate(region):
        if char.isspace() or unicodedata.category(char).startswith("C"):
            kind = "whitespace" if char.isspace() else "a control character"
            raise ConfigurationError(
                f"region name {region!r} holds {kind} (U+{ord(char):04X}) at position {at}; "
                "a region name may not hold whitespace or control characters"
            )
    return region


def _check_count(region: str, count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigurationError(
            f"GCounter entry for region {region!r} is {count!r}; it must be a whole number >= 0"
        )
    return count


@dataclass(frozen=True, slots=True)
class GCounter:
    """Per-region counts, sorted by region name, no zero entries; build with ``GCounter.of``."""

    entries: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> GCounter:
        """A counter holding ``counts`` (region name -> count >= 0)."""
        checked = {check_region(r): _check_count(r, n) for r, n in counts.items()}
        return _normal(checked)

    def get(self, region: str) -> int:
        """The entry of ``region`` (0 when it has none)."""
        for name, count in self.entries:
            if name == region:
                return count
        return 0

    @property
    def value(self) -> int:
        """The total over every region."""
        return sum(count for _, count in self.entries)

    def increment(self, region: str, amount: int = 1) -> GCounter:
        """A copy with ``amount`` (>= 0) added to ``region``'s own entry."""
        _check_count(region, amount)
        counts = dict(self.entries)
        counts[check_region(region)] = counts.get(region, 0) + amount
        return _normal(counts)

    def merge(self, other: GCounter) -> GCounter:
        """The least counter at least as large as both: the max of each region's entries."""
        counts = dict(self.entries)
        for region, count in other.entries:
            if count > counts.get(region, 0):
                counts[region] = count
        return _normal(counts)

    def as_dict(self) -> dict[str, int]:
        """The entries as a plain dict."""
        return dict(self.entries)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.entries)


def _normal(counts: Mapping[str, int]) -> GCounter:
    """Sorted by region, zero entries dropped: a zero entry and no entry are the same state."""
    return GCounter(tuple(sorted((r, n) for r, n in counts.items() if n)))
