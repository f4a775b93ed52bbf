"""What an Envoy's token bucket holds at least, so that an abandon does not refill it.

Envoy starts every new token bucket full, and erases a bucket it is told to abandon. An
Envoy that comes back to a bucket after ``--rlqs-idle`` seconds without a request is a
new member; handed a new share, it would start a full bucket again: a pause longer than
the idle time would refill a day limit's burst in seconds. So a member keeps a ``Refill``,
a lower bound of the tokens its Envoy's bucket holds: full when a share is handed out
afresh, refilled at the share's rate up to its capacity, and less every request its
Envoy reports allowed (taken at the report's arrival: a request counted late, or one
admitted before the bucket started, only lowers the bound). At an abandon, a bucket that
is not full again is remembered (``Abandoned``) until it would be; a stream that comes
back to it before then is sent no more capacity than that bucket would hold by then
(``Refill.cap``), so its Envoy never holds more than if it had kept the bucket, and what
it admits stays within the steady figure ``r W + M`` of docs/rlqs.md#the-bound. Pure.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable
from dataclasses import dataclass

from ratewarden.server.rlqs.shares import NOTHING, Share

__all__ = ["ABANDONED_CAP", "Abandoned", "Refill"]

#: Abandoned buckets remembered at most (those that would be full soonest are dropped first).
ABANDONED_CAP = 100_000


@dataclass(slots=True)
class Refill:
    """At least ``tokens`` in an Envoy's token bucket of ``share`` (refilled every ``fill_s``
    seconds) at ``at``: see the module docstring."""

    share: Share
    fill_s: int
    tokens: float
    at: float

    @classmethod
    def full(cls, share: Share, fill_s: int, now: float) -> Refill:
        """A share handed out afresh: Envoy starts it full."""
        return cls(share, fill_s, float(share.max_tokens), now)

    def level(self, now: float) -> float:
        """The tokens it holds at least at ``now``."""
        rate = self.share.tokens_per_fill / self.fill_s
        return min(self.share.max_tokens, self.tokens + rate * max(0.0, now - self.at))

    def take(self, now: float, allowed: int) -> None:
        """Its Envoy reported ``allowed`` requests at ``now``."""
        self.tokens, self.at = self.level(now) - allowed, now

    def full_at(self) -> float:
        """When it is full again (the remembered bucket is then of no use)."""
        missing = max(0.0, self.share.max_tokens - self.tokens)
        return self.at + missing * self.fill_s / self.share.tokens_per_fill

    def cap(self, target: Share, had: Share, now: float) -> Share | None:
        """What a member that came back to an abandoned bucket is sent instead of ``target``
        while it holds ``had`` (``NOTHING``: none): ``had`` again while this bucket holds no
        more whole tokens than it, else a share of the tokens it holds (NOTHING: none yet).
        Never above ``target`` (an empty one is sent as it is), so the split's sums hold.
        None once this bucket holds ``target``'s capacity, or is full: the member is then
        sent its shares as any other."""
        if target.empty:
            return target
        level = self.level(now)
        if level >= min(target.max_tokens, self.share.max_tokens):
            return None
        tokens = math.floor(level)
        if (
            not had.empty
            and had.tokens_per_fill <= target.tokens_per_fill
            and tokens <= had.max_tokens <= target.max_tokens
        ):
            return had
        if tokens < 1:
            return NOTHING
        return Share(min(target.tokens_per_fill, self.share.tokens_per_fill), tokens)


class Abandoned:
    """Members' buckets left not full at an abandon, by (domain, bucket, stream), each until
    it would be full again; at most ``cap`` of them, those full soonest dropped first."""

    def __init__(self, cap: int = ABANDONED_CAP) -> None:
        self.cap = cap
        self._found: dict[Hashable, tuple[int, Refill]] = {}
        self._order: list[tuple[float, int, Hashable]] = []
        self._count = 0

    def __len__(self) -> int:
        return len(self._found)

    def remember(self, key: Hashable, refill: Refill, now: float) -> None:
        """``refill``, the bucket of a member abandoned at ``now``, unless it is full."""
        self._expire(now)
        if refill.level(now) >= refill.share.max_tokens:
            return
        self._count += 1
        self._found[key] = (self._count, refill)
        heapq.heappush(self._order, (refill.full_at(), self._count, key))
        while len(self._found) > self.cap:
            self._pop()
        if len(self._order) > 2 * max(self.cap, len(self._found)):
            # Entries taken back stay in the heap until they expire: rebuilt, it is bounded.
            self._order = [(r.full_at(), n, k) for k, (n, r) in self._found.items()]
            heapq.heapify(self._order)

    def take(self, key: Hashable, now: float) -> Refill | None:
        """The bucket remembered for ``key``, forgotten here (None: none, or full again)."""
        self._expire(now)
        found = self._found.pop(key, None)
        return None if found is None else found[1]

    def _expire(self, now: float) -> None:
        while self._order and self._order[0][0] <= now:
            self._pop()

    def _pop(self) -> None:
        _, count, key = heapq.heappop(self._order)
        found = self._found.get(key)
        if found is not None and found[0] == count:
            del self._found[key]
