"""HotKeyDetector: which keys this process sees above a rate, in bounded memory.

A Space-Saving sketch (Metwally, Agrawal and El Abbadi, 2005; ``ratewarden.topk``) per interval:
``capacity`` counters, each a key, its count and the most it may overcount.
A key already counted adds its cost; a new key takes a free counter, or else
replaces the smallest one and inherits its count as its error. Its guarantees,
for ``n`` units counted in an interval:

- a tracked key's estimate is never below its true count, and at most
  ``n / capacity`` above it;
- every key whose true count exceeds ``n / capacity`` is tracked.

So a key whose true rate passes the threshold is never missed once
``n / capacity`` is below the threshold's count, and a reported key's true rate
is at least its estimate minus the stated error.

The rate is read over a sliding interval made of two fixed ones: the previous
interval's count weighted by the share of it still inside the sliding interval,
plus the current count. Memory is two sketches of ``capacity`` counters, whatever
the number of keys. Time comes from the injected clock, so tests use ManualClock.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock, SystemClock, check_clock
from ratewarden.errors import ConfigurationError
from ratewarden.topk import SpaceSaving

__all__ = ["HotKey", "HotKeyDetector", "exit_ratio_of", "hold_us"]


@dataclass(frozen=True, slots=True)
class HotKey:
    """A key over the threshold: its estimated rate (units per second) and the estimate's error."""

    key: str
    rate: float
    error: float


def _positive(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"hot-key {what} {value!r} must be a positive number")
    if not 0 < value < math.inf:
        raise ConfigurationError(f"hot-key {what} {value!r} must be a positive, finite number")
    return float(value)


class HotKeyDetector:
    """Reports keys whose rate in this process exceeds ``threshold`` units per second.

    ``record(key, cost)`` counts a request and says whether the key is hot now;
    ``hot()`` lists every key over the threshold, hottest first. ``interval`` is
    the length of the sliding interval in seconds (default 1); ``capacity`` the
    number of counters per interval (default 64): keys with a rate above
    ``total rate / capacity`` are never missed. Thread-safe.
    """

    __slots__ = (
        "_current",
        "_lock",
        "_previous",
        "_start_us",
        "_threshold_count",
        "capacity",
        "clock",
        "interval_us",
        "threshold",
    )

    @keywords_checked
    def __init__(
        self,
        threshold: float,
        *,
        interval: float = 1.0,
        capacity: int = 64,
        clock: Clock | None = None,
    ) -> None:
        self.threshold = _positive("threshold", threshold)
        self.interval_us = max(1, round(_positive("interval", interval) * 1_000_000))
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(
                f"hot-key capacity {capacity!r} must be a whole number of counters >= 1"
            )
        self.capacity = capacity
        # The threshold as a count per interval: ``record`` compares counts, no division.
        self._threshold_count = self.threshold * self.interval_us / 1_000_000
        self.clock: Clock = check_clock("HotKeyDetector", clock) or SystemClock()
        self._lock = threading.Lock()
        self._current = SpaceSaving(capacity)
        self._previous = SpaceSaving(capacity)
        self._start_us = self._aligned(self.clock.now_us())

    def record(self, key: str, cost: int = 1) -> bool:
        """Count ``cost`` units of ``key`` now; True when its rate is over the threshold."""
        return self._count(key, cost) > self._threshold_count

    def record_rate(self, key: str, cost: int = 1) -> float:
        """Count ``cost`` units of ``key`` now; its estimated rate (units per second), for a
        caller that compares it with more than one threshold (``HotKeyLimiter``'s exit)."""
        return self._count(key, cost) * 1_000_000 / self.interval_us

    def _count(self, key: str, cost: int) -> float:
        """Count ``cost`` units of ``key``; its estimated count over the sliding interval."""
        _check_key(key)
        if type(cost) is not int or cost < 0:
            raise ConfigurationError(f"hot-key detector: cost {cost!r} must be a whole number >= 0")
        with self._lock:
            weight = self._roll()
            count = self._current.add(key, cost)  # a cost of 0 only reads the count
            old = self._previous.count(key)
            return count + weight * old if old else count

    def rate(self, key: str) -> HotKey:
        """``key``'s estimated rate over the sliding interval, and the most it may overstate it."""
        _check_key(key)
        with self._lock:
            return self._estimate(key, self._roll())

    def hot(self) -> list[HotKey]:
        """Every tracked key whose estimated rate is over the threshold, hottest first."""
        with self._lock:
            weight = self._roll()
            keys = self._current.keys() | self._previous.keys()
            found = [self._estimate(key, weight) for key in keys]
        return sorted((k for k in found if k.rate > self.threshold), key=lambda k: -k.rate)

    def _estimate(self, key: str, weight: float) -> HotKey:
        count, error = self._current.get(key)
        old_count, old_error = self._previous.get(key)
        per_s = 1_000_000 / self.interval_us
        return HotKey(
            key,
            (count + weight * old_count) * per_s,
            (error + weight * old_error) * per_s,
        )

    def _aligned(self, now_us: int) -> int:
        return now_us - now_us % self.interval_us

    def _roll(self) -> float:
        """Start new intervals as time passes; the weight of the previous one now."""
        now = self.clock.now_us()
        if now >= self._start_us + self.interval_us:
            ended_long_ago = now >= self._start_us + 2 * self.interval_us
            self._previous = SpaceSaving(self.capacity) if ended_long_ago else self._current
            self._current = SpaceSaving(self.capacity)
            self._start_us = self._aligned(now)
        # A clock stepped back counts into the current interval (weight capped at 1).
        elapsed = min(max(now - self._start_us, 0), self.interval_us)
        return 1.0 - elapsed / self.interval_us

    def __repr__(self) -> str:
        return (
            f"HotKeyDetector(threshold={self.threshold:g}/s, "
            f"interval={self.interval_us / 1_000_000:g}s, capacity={self.capacity})"
        )


def _check_key(key: object) -> None:
    if type(key) is not str or not key:
        raise ConfigurationError(f"hot-key detector: key {key!r} must be a non-empty string")


def hold_us(hold: object) -> int:
    """A ``HotKeyLimiter``'s ``hold`` (seconds, checked) in microseconds."""
    if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 < hold < math.inf:
        raise ConfigurationError(f"hold {hold!r} must be a positive number of seconds")
    return max(1, math.ceil(hold * 1_000_000))


def exit_ratio_of(ratio: object) -> float:
    """A ``HotKeyLimiter``'s ``exit_ratio``, checked."""
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
        raise ConfigurationError(
            f"exit_ratio {ratio!r} must be a number in (0, 1]: the share of the detector's "
            "threshold below which a detected key may leave (1 for no rate hysteresis)"
        )
    return float(ratio)
