"""What shadow rules would have blocked: counts, first and last time, top keys, in bounded memory.

Top keys are counted with the Space-Saving algorithm (Metwally et al., 2005;
``ratewarden.topk``): at most ``capacity`` keys are tracked; a new key evicts
the smallest count and inherits it. Every key whose true count exceeds
``total / capacity`` is tracked, and a tracked key's count over-states its true
count by at most its ``error`` (reported with it), so the top of the list is right.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ratewarden.errors import ConfigurationError
from ratewarden.topk import Heavy, SpaceSaving

__all__ = ["ShadowLog", "ShadowSummary", "TopKey"]


@dataclass(frozen=True, slots=True)
class TopKey(Heavy):
    """A key and how many requests of it would have been blocked (``count - error`` at least)."""


@dataclass(frozen=True, slots=True)
class ShadowSummary:
    """One shadow rule's report: what it would have blocked, since when."""

    rule: str
    would_block: int
    first_at: float
    last_at: float
    top_keys: tuple[TopKey, ...]


class _RuleLog:
    __slots__ = ("first_at", "keys", "last_at")

    def __init__(self, now: float, capacity: int) -> None:
        self.first_at = now
        self.last_at = now
        self.keys = SpaceSaving(capacity)

    def add(self, key: str, now: float) -> None:
        self.last_at = now
        self.keys.add(key)


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
                log = self._rules[rule] = _RuleLog(now, self._capacity)
            log.add(key, now)

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
        keys = tuple(TopKey(h.key, h.count, h.error) for h in log.keys.top(top))
        return ShadowSummary(name, log.keys.total, log.first_at, log.last_at, keys)
