"""What the dashboard shows, recorded as it happens: bounded, per second, mergeable.

``LiveStats`` is fed by the service's stats hooks (``ServiceStats``) and keeps,
for the last ``history_s`` seconds, per-second counts per rule (decisions, over
the limit, near it, shadow would-have-blocked, degraded) and a histogram of
store call times; since start, per-rule totals; and three Space-Saving sketches
of the heaviest keys over the limit, near it, and over a shadow rule. The
sketches cover the last one to two ``top_window_s``: two generations rotate, so
a key that stopped misbehaving drops out.

``state()`` is plain JSON data. Several worker processes each write theirs and
``ratewarden.server.dashboard.view.render`` merges them: counts add up, sketches
merge with their error bounds.

Memory is bounded whatever the traffic: ``history_s`` seconds x ``max_rules``
rules x 5 integers, 3 x 2 sketches of ``top_capacity`` keys of at most
``MAX_KEY_CHARS`` characters, and one histogram per second. Rule names are cut
to ``MAX_LABEL_CHARS`` (128) characters, as the metrics' ``rule`` label is, and
key text to ``MAX_KEY_CHARS``: a longer text keeps its start, then ``…`` and a
hash of the whole (``ratewarden.labels.bounded``), so long values that share
their start stay apart.
"""

from __future__ import annotations

import math
import os
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ratewarden.clock import Clock, SystemClock
from ratewarden.labels import bounded
from ratewarden.topk import SpaceSaving

__all__ = [
    "CATEGORIES",
    "FIELDS",
    "LATENCY_BOUNDS",
    "MAX_KEY_CHARS",
    "OTHER",
    "LiveStats",
    "key_text",
]

#: Per-rule counters, in the order of every ``[...]`` list in ``state()``.
FIELDS = ("decisions", "over", "near", "shadowed", "degraded")
DECISIONS, OVER, NEAR, SHADOWED, DEGRADED = range(len(FIELDS))
#: The top-key sketches: over the limit (enforced), near it, over a shadow rule.
CATEGORIES = ("over", "near", "shadow")
#: Upper bounds (seconds) of the store latency buckets: 8 a decade, 10 us to 10 s.
LATENCY_BOUNDS = tuple(10 ** (exp / 8) for exp in range(-40, 9))
_INF = math.inf
#: A key's text is cut to this many characters (the sketch's memory bound).
MAX_KEY_CHARS = 200
#: The rule of decisions past ``max_rules`` distinct rules.
OTHER = "other"
_SEP = "\x00"


def key_text(entries: Sequence[tuple[str, str]]) -> str:
    """A descriptor's entries as one line: ``key=value, key=value`` (bounded to MAX_KEY_CHARS)."""
    text = ", ".join(f"{key}={value}" if value else key for key, value in entries)
    return bounded(text, MAX_KEY_CHARS)


@dataclass(slots=True)
class _Second:
    rules: dict[str, list[int]] = field(default_factory=dict)
    latency: dict[int, int] = field(default_factory=dict)
    calls: int = 0
    seconds_sum: float = 0.0
    seconds_max: float = 0.0


def _bucket(seconds: float) -> int:
    """The index of the first bound >= seconds (len(bounds) for slower)."""
    return bisect_left(LATENCY_BOUNDS, seconds)


class LiveStats:
    """Recent per-rule counts, store latency and top keys; see the module docstring."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        history_s: int = 60,
        top_capacity: int = 100,
        top_window_s: float = 60.0,
        max_rules: int = 1000,
    ) -> None:
        for name, value in (
            ("history_s", history_s),
            ("top_capacity", top_capacity),
            ("max_rules", max_rules),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not top_window_s > 0:
            raise ValueError(f"top_window_s must be positive, got {top_window_s!r}")
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.history_s = history_s
        self.top_capacity = top_capacity
        self.top_window_s = float(top_window_s)
        self.max_rules = max_rules
        self._lock = threading.Lock()
        self._seconds: dict[int, _Second] = {}
        self._totals: dict[str, list[int]] = {}
        self._modes: dict[str, dict[str, int]] = {}
        self._generation = self._generation_of(self.clock.now())
        self._top = self._fresh_sketches()
        self._previous = self._fresh_sketches()

    # --- recording ----------------------------------------------------------------

    def decision(
        self,
        rule: str,
        entries: Sequence[tuple[str, str]],
        *,
        hits: int,
        over: bool,
        shadowed: bool,
        near_hits: int,
        degraded: str | None,
    ) -> None:
        """One descriptor decided by ``rule``: what the service reported for it."""
        counts = [0] * len(FIELDS)
        counts[DECISIONS] = 1
        counts[OVER] = int(over and not shadowed)
        counts[SHADOWED] = int(shadowed)
        counts[NEAR] = int(bool(near_hits))
        counts[DEGRADED] = int(degraded is not None)
        self.add(rule, counts)
        if degraded is not None:
            self.degraded(rule, degraded)
        if over or near_hits:
            category = "shadow" if shadowed else "over" if over else "near"
            self.top(category, rule, entries, max(hits, 1) if over else near_hits)

    def add(self, rule: str, counts: Sequence[int]) -> None:
        """Several decisions of ``rule`` at once, counted now: ``counts`` starts with
        decisions, over (enforced), near, shadowed and degraded, in that order (a
        tallying caller's flush; ``degraded(rule, mode)`` gives the modes)."""
        now = self.clock.now()
        with self._lock:
            rule = self._rule(rule)
            second = self._second(now).rules.setdefault(rule, [0] * len(FIELDS))
            totals = self._totals[rule]
            for index in range(len(FIELDS)):
                amount = counts[index]
                if amount:
                    second[index] += amount
                    totals[index] += amount

    def degraded(self, rule: str, mode: str) -> None:
        """A failure ``mode`` answered for ``rule`` (its count is in ``add``'s degraded)."""
        with self._lock:
            rule = self._rule(rule)
            modes = self._modes.setdefault(rule, {})
            mode = bounded(mode)
            modes[mode] = modes.get(mode, 0) + 1

    def top(
        self, category: str, rule: str, entries: Sequence[tuple[str, str]], weight: int
    ) -> None:
        """A descriptor of ``rule`` over the limit (``over``, or ``shadow`` for a shadow
        rule) or ``near`` it, weighing ``weight`` hits, for the top-key sketches."""
        now = self.clock.now()
        with self._lock:
            rule = self._rule(rule)
            self._rotate(now)
            self._top[category].add(rule + _SEP + key_text(entries), weight)

    def store_call(self, seconds: float) -> None:
        """One store call took ``seconds``."""
        self.store_calls((seconds,))

    def store_calls(self, times: Sequence[float]) -> None:
        """Store calls that took ``times`` seconds each, counted now (under one hold of the
        lock); a time that is negative, infinite or NaN is skipped."""
        # Sorted into buckets before the lock is taken: a flush hands over thousands.
        valid = [seconds for seconds in times if seconds >= 0 and seconds != _INF]  # not NaN
        if not valid:
            return
        buckets = Counter([_bucket(seconds) for seconds in valid])
        total, slowest = sum(valid), max(valid)
        now = self.clock.now()
        with self._lock:
            second = self._second(now)
            latency = second.latency
            for index, count in buckets.items():
                latency[index] = latency.get(index, 0) + count
            second.calls += len(valid)
            second.seconds_sum += total
            second.seconds_max = max(second.seconds_max, slowest)

    # --- reading ------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything recorded, as JSON data (see ``view.render`` for its reader)."""
        now = self.clock.now()
        with self._lock:
            self._prune(int(now))
            self._rotate(now)
            seconds = [
                {
                    "t": t,
                    "rules": {rule: list(counts) for rule, counts in s.rules.items()},
                    "latency": {str(i): n for i, n in s.latency.items()},
                    "calls": s.calls,
                    "sum": s.seconds_sum,
                    "max": s.seconds_max,
                }
                for t, s in sorted(self._seconds.items())
            ]
            top = {}
            for category in CATEGORIES:
                parts = (self._top[category], self._previous[category])
                top[category] = [
                    {
                        "entries": [[h.key, h.count, h.error] for h in sketch.top()],
                        "floor": sketch.floor,
                    }
                    for sketch in parts
                ]
            return {
                "pid": os.getpid(),
                "at": now,
                "history_s": self.history_s,
                "top_capacity": self.top_capacity,
                "seconds": seconds,
                "totals": {rule: list(counts) for rule, counts in self._totals.items()},
                "modes": {rule: dict(modes) for rule, modes in self._modes.items()},
                "top": top,
            }

    # --- internals ----------------------------------------------------------------

    def _rule(self, rule: str) -> str:
        rule = bounded(rule)
        if rule not in self._totals:
            if len(self._totals) >= self.max_rules:
                rule = OTHER
            self._totals.setdefault(rule, [0] * len(FIELDS))
        return rule

    def _second(self, now: float) -> _Second:
        t = int(now)
        second = self._seconds.get(t)
        if second is None:
            self._prune(t)
            second = self._seconds[t] = _Second()
        return second

    def _prune(self, t: int) -> None:
        oldest = t - self.history_s + 1
        for old in [s for s in self._seconds if s < oldest]:
            del self._seconds[old]

    def _generation_of(self, now: float) -> int:
        return math.floor(now / self.top_window_s)

    def _fresh_sketches(self) -> dict[str, SpaceSaving]:
        return {category: SpaceSaving(self.top_capacity) for category in CATEGORIES}

    def _rotate(self, now: float) -> None:
        generation = self._generation_of(now)
        if generation == self._generation:
            return
        self._previous = self._top if generation == self._generation + 1 else self._fresh_sketches()
        self._top = self._fresh_sketches()
        self._generation = generation

    def __repr__(self) -> str:
        return f"LiveStats(history_s={self.history_s}, top_capacity={self.top_capacity})"
