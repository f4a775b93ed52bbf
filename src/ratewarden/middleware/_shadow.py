"""What shadow rules would have blocked: counts, first and last time, top keys, in bounded memory.

Top keys are counted with the Space-Saving algorithm (Metwally et al., 2005):
at most ``capacity`` keys are tracked; a new key evicts the smallest count and
inherits it. Every key whose true count exceeds ``total / capacity`` is
tracked, and a tracked key's count over-states its true count by at most
its ``error`` (reported with it), so the top of the list is right.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ratewarden.errors import ConfigurationError

__all__ = ["ShadowLog", "ShadowSummary", "TopKey"]


@dataclass(frozen=True, slots=True)
class TopKey:
    """A key and how many requests of it would have been blocked (``count - error`` at least)."""

    key: str
    count: int
    error: int


@dataclass(frozen=True, slots=True)
class ShadowSummary:
    """One shadow rule's report: what it would have blocked, since when."""

    rule: str
    would_block: int
    first_at: float
    last_at: float
    top_keys: tuple[TopKey, ...]


class _RuleLog:
    __slots__ = ("counts", "errors", "first_at", "last_at", "total")

    def __init__(self, now: float) -> None:
        self.total = 0
        self.first_at = now
        self.last_at = now
        self.counts: dict[str, int] = {}
        self.errors: dict[str, int] = {}

    def add(self, key: str, now: float, capacity: int) -> None:
        self.total += 1
        self.last_at = now
        if key in self.counts:
            self.counts[key] += 1
            return
        if len(self.counts) < capacity:
            self.counts[key] = 1
            self.errors[key] = 0
            return
        smallest = min(self.counts, key=self.counts.__getitem__)
        floor = self.counts.pop(smallest)
        del self.errors[smallest]
        self.counts[key] = floor + 1
        self.errors[key] = floor


class ShadowLog:
    """Thread-safe record of shadow denials, per rule; ``capacity`` keys tracked per rule."""

    def __init__(self, capacity: int = 100) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(f"shadow report size {capacity!r} must be a whole number >= 1")
        self._capacity = capacity
        self._lock = threading.Lock()
        self._rules: dict[str, _RuleLog] = {}

    def record(self, rule: str, key: str, now: float) -> None:
        """Count one request that ``rule`` would have blocked."""
        with self._lock:
            log = self._rules.get(rule)
            if log is None:
                log = self._rules[rule] = _RuleLog(now)
            log.add(key, now, self._capacity)

    def report(self, top: int = 10) -> dict[str, ShadowSummary]:
        """A snapshot per rule that would have blocked something; ``top`` keys, largest first."""
        with self._lock:
            return {name: self._summary(name, log, top) for name, log in self._rules.items()}

    def clear(self) -> None:
        """Forget everything recorded (e.g. after reviewing a dark launch)."""
        with self._lock:
            self._rules.clear()

    @staticmethod
    def _summary(name: str, log: _RuleLog, top: int) -> ShadowSummary:
        ranked = sorted(log.counts.items(), key=lambda item: (-item[1], item[0]))[:top]
        keys = tuple(TopKey(key, count, log.errors[key]) for key, count in ranked)
        return ShadowSummary(name, log.total, log.first_at, log.last_at, keys)
