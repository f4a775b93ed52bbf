"""NegativeCache: keys the global store has just denied, denied here until their retry time.

When the store says "no, retry in 4.2 s", asking it again before then can only
get another no (time is the only thing that frees a GCRA or window key, and
other processes only use more). So the denial is remembered until that instant
and answered locally, with no network. Entries are bounded in number (least
recently used dropped first) and in time (each expires at its own retry time,
or after ``max_hold`` seconds when that is sooner).

What the cache cannot hear is another process freeing the key before then: a
``reset`` (support lifting a customer's block) or a refund made elsewhere. With
``max_hold`` a denial is answered locally for at most that long, then the store
is asked again, so a reset anywhere is heard here within ``max_hold``; a key that
stays denied costs one store call per ``max_hold`` per process instead of one.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import NamedTuple

from ratewarden.checks import keywords_checked
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError

__all__ = ["DEFAULT_NEGATIVE_KEYS", "Denial", "NegativeCache"]

#: Keys remembered at once by default; one entry is a few hundred bytes.
DEFAULT_NEGATIVE_KEYS = 10_000


class Denial(NamedTuple):
    """A remembered denial: the store's Decision, when it was made, and until when it holds."""

    decision: Decision
    at_us: int
    until_us: int


class NegativeCache:
    """Remember store denials until their retry time; thread-safe, at most ``max_keys`` keys.

    A denial for cost ``c`` also answers later requests of cost ``>= c`` (they
    need at least as much room), never cheaper ones: a request of cost 1 may
    fit where one of cost 5 did not, so it goes to the store. ``max_hold``
    (seconds, default None: until the retry time) caps how long one denial is
    answered here, which bounds how long a reset made by another process goes
    unheard. A cached denial's ``retry_after`` is still the store's, counting down.
    """

    __slots__ = ("_entries", "_hold_us", "_lock", "hits", "max_hold", "max_keys")

    @keywords_checked
    def __init__(
        self, max_keys: int = DEFAULT_NEGATIVE_KEYS, *, max_hold: float | None = None
    ) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(
                f"negative cache max_keys {max_keys!r} must be a whole number >= 1"
            )
        if max_hold is not None and (
            isinstance(max_hold, bool)
            or not isinstance(max_hold, int | float)
            or not 0 < max_hold < math.inf
        ):
            raise ConfigurationError(
                f"negative cache max_hold {max_hold!r} must be a positive number of seconds "
                "(or None: until the store's retry time)"
            )
        self.max_keys = max_keys
        self.max_hold = max_hold
        self._hold_us = None if max_hold is None else max(1, round(max_hold * 1_000_000))
        self.hits = 0
        self._entries: OrderedDict[Hashable, Denial] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, key: Hashable, decision: Decision, now_us: int) -> bool:
        """Keep ``decision`` (a denial) for ``key``; False if it cannot be cached.

        A denial with no finite retry time (a cost above capacity) or no wait at
        all is not kept: there is no instant to deny until.
        """
        retry = decision.retry_after
        if decision.allowed or not 0 < retry < float("inf"):
            return False
        held_us = round(retry * 1_000_000)
        if self._hold_us is not None and self._hold_us < held_us:
            held_us = self._hold_us
        until_us = now_us + held_us
        with self._lock:
            self._entries[key] = Denial(decision, now_us, until_us)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_keys:
                self._entries.popitem(last=False)
        return True

    def lookup(self, key: Hashable, cost: int, now_us: int) -> Denial | None:
        """The denial that still holds for ``key`` at ``now_us`` for this cost, else None."""
        if key not in self._entries:  # the common case, answered without the lock
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.until_us <= now_us:
                del self._entries[key]
                return None
            if cost < entry.decision.cost:
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def __contains__(self, key: object) -> bool:
        """Whether a denial of ``key`` is held, live or not yet swept (no lock: a hint)."""
        return key in self._entries

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s denial (after a reset, say)."""
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        """Entries held, expired ones included until looked up or pushed out."""
        return len(self._entries)

    def __repr__(self) -> str:
        hold = "" if self.max_hold is None else f", max_hold={self.max_hold}"
        return f"NegativeCache(max_keys={self.max_keys}{hold}, held={len(self._entries)})"
