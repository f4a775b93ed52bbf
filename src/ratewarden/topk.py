"""Space-Saving: the heaviest keys of a stream in bounded memory, mergeable across processes.

Metwally, Agrawal and El Abbadi's algorithm keeps ``capacity`` counters. A key
already tracked adds its weight; a new key takes a free counter, or replaces the
smallest one and inherits its count as ``error``. Every reported ``count`` is an
upper bound of the key's true weight and ``count - error`` a lower bound, and
any key heavier than ``total / capacity`` is guaranteed to be tracked.

``merge`` combines sketches from several processes (the ``--workers`` of one
server) keeping the same guarantee: a key missing from a full sketch may have
weighed up to that sketch's smallest count there, which is added to both its
count and its error.

The one Space-Saving of ratewarden, a leaf: the hot-key detector counts each
interval with it, the middleware's shadow report the keys a shadow rule would
have blocked, and the server's dashboard its top keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ratewarden.checks import keywords_checked
from ratewarden.errors import ConfigurationError

__all__ = ["Heavy", "SpaceSaving", "merge"]


@dataclass(frozen=True, slots=True)
class Heavy:
    """One tracked key: ``count - error <= true weight <= count``."""

    key: str
    count: int
    error: int


class SpaceSaving:
    """At most ``capacity`` counters; ``add(key, weight)``, then ``top(n)``. Not thread-safe."""

    __slots__ = ("_counts", "_errors", "capacity", "total")

    @keywords_checked
    def __init__(self, capacity: int = 100) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(
                f"SpaceSaving capacity {capacity!r} must be a whole number >= 1"
            )
        self.capacity = capacity
        self.total = 0
        self._counts: dict[str, int] = {}
        self._errors: dict[str, int] = {}

    def add(self, key: str, weight: int = 1) -> int:
        """Count ``weight`` (>= 1) more for ``key``; its count now (0 when untracked).

        A weight below 1 counts nothing and only reads the count. A weight that is not a
        whole number (``1.5``, ``"1"``) is a ``ConfigurationError``: counts stay whole.
        """
        if type(weight) is not int:  # the usual int passes on one test
            _check_weight(weight)
        counts = self._counts
        count = counts.get(key)
        if weight < 1:
            return 0 if count is None else count
        self.total += weight
        if count is not None:
            counts[key] = count = count + weight
            return count
        if len(counts) < self.capacity:
            counts[key] = weight
            self._errors[key] = 0
            return weight
        smallest = min(counts, key=counts.__getitem__)
        floor = counts.pop(smallest)
        del self._errors[smallest]
        counts[key] = count = floor + weight
        self._errors[key] = floor
        return count

    def count(self, key: str) -> int:
        """``key``'s count; 0 when it is not tracked."""
        return self._counts.get(key, 0)

    def get(self, key: str) -> tuple[int, int]:
        """``key``'s ``(count, error)``; ``(0, 0)`` when it is not tracked."""
        return self._counts.get(key, 0), self._errors.get(key, 0)

    def keys(self) -> set[str]:
        """The tracked keys."""
        return set(self._counts)

    @property
    def full(self) -> bool:
        """Every counter is taken: an untracked key may have weighed up to ``floor``."""
        return len(self._counts) >= self.capacity

    @property
    def floor(self) -> int:
        """The smallest tracked count when full, else 0."""
        return min(self._counts.values()) if self.full else 0

    def top(self, n: int | None = None) -> list[Heavy]:
        """The ``n`` heaviest keys (all when None), heaviest first, ties by key."""
        ranked = sorted(self._counts.items(), key=lambda item: (-item[1], item[0]))
        if n is not None:
            ranked = ranked[:n]
        return [Heavy(key, count, self._errors[key]) for key, count in ranked]

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, key: object) -> bool:
        return key in self._counts

    def __repr__(self) -> str:
        return f"SpaceSaving(capacity={self.capacity}, tracked={len(self)}, total={self.total})"


def _check_weight(weight: object) -> None:
    """An int subclass other than bool (an ``IntEnum``) is a weight; nothing else is."""
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise ConfigurationError(
            f"SpaceSaving.add: weight {weight!r} must be a whole number (an int); "
            "counts and their error bounds are whole"
        )


def merge(parts: Iterable[tuple[Sequence[Heavy], int]], capacity: int) -> list[Heavy]:
    """The ``capacity`` heaviest keys over several sketches, each given as ``(top(), floor)``.

    ``floor`` is the sketch's ``floor`` (0 when it was not full). Heaviest first.
    """
    listed = [({h.key: h for h in heavies}, floor) for heavies, floor in parts]
    keys = {key for entries, _ in listed for key in entries}
    merged: list[Heavy] = []
    for key in keys:
        count = error = 0
        for entries, floor in listed:
            found = entries.get(key)
            if found is None:
                count += floor
                error += floor
            else:
                count += found.count
                error += found.error
        merged.append(Heavy(key, count, error))
    merged.sort(key=lambda heavy: (-heavy.count, heavy.key))
    return merged[:capacity]
