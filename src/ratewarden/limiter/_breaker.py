"""CircuitBreaker: stop paying the store's timeout on every request during an outage.

Three states, with time from an injected clock::

    closed ──(N consecutive failures, or failure ratio over the last W calls)──► open
    open ──(cool-down elapsed; the next caller becomes the probe)──► half_open
    half_open ──(probe succeeds)──► closed        half_open ──(probe fails)──► open

While open, ``allow()`` answers False at once: callers take their failure mode
without a store call. After ``cooldown`` seconds one caller (``probes`` callers
at most) is let through as a probe; everyone else is still refused until the
probe reports back. A probe that never reports (cancelled, or an error that is
not a storage failure) gives its place back through ``abandon()``.
"""

from __future__ import annotations

import math
import threading
from collections import deque

from ratewarden.checks import is_number
from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError
from ratewarden.metrics import NO_METRICS, Metrics

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker"]

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


def _whole(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(
            f"CircuitBreaker {name} {value!r} must be a whole number >= {least}"
        )
    return value


def _seconds(name: str, value: object) -> float:
    if not is_number(value, low_ok=False):
        raise ConfigurationError(
            f"CircuitBreaker {name} {value!r} must be a positive number of seconds"
        )
    return float(value)


def _ratio(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigurationError(
            f"CircuitBreaker failure_ratio {value!r} must be above 0 and at most 1, or None"
        )
    return float(value)


class CircuitBreaker:
    """A thread-safe circuit breaker over calls to one store.

    - ``failures``: consecutive failures that open it (default 5).
    - ``failure_ratio`` / ``window`` / ``min_calls``: it also opens when at least
      ``failure_ratio`` of the last ``window`` calls failed, once ``min_calls``
      calls are in the window (default 0.5 of 20, from 10 calls); ``None`` turns
      the ratio off.
    - ``cooldown``: seconds open before a probe is let through (default 1.0).
    - ``probes``: callers let through at once while half open (default 1).

    ``metrics.breaker(name=..., state=...)`` is called on every transition. Share
    one breaker between every limiter that talks to the same store.
    """

    __slots__ = (
        "_calls",
        "_clock",
        "_consecutive",
        "_cooldown_us",
        "_in_flight",
        "_lock",
        "_metrics",
        "_opened_at_us",
        "_state",
        "cooldown",
        "failure_ratio",
        "failures",
        "min_calls",
        "name",
        "probes",
        "window",
    )

    def __init__(
        self,
        *,
        failures: int = 5,
        failure_ratio: float | None = 0.5,
        window: int = 20,
        min_calls: int = 10,
        cooldown: float = 1.0,
        probes: int = 1,
        clock: Clock | None = None,
        metrics: Metrics = NO_METRICS,
        name: str = "store",
    ) -> None:
        self.failures = _whole("failures", failures, 1)
        self.failure_ratio = _ratio(failure_ratio)
        self.window = _whole("window", window, 1)
        self.min_calls = _whole("min_calls", min_calls, 1)
        if self.min_calls > self.window:
            raise ConfigurationError(
                f"CircuitBreaker min_calls {min_calls!r} is above window {window!r}: "
                "the ratio could never be judged"
            )
        self.cooldown = _seconds("cooldown", cooldown)
        self._cooldown_us = max(1, math.ceil(self.cooldown * 1_000_000))
        self.probes = _whole("probes", probes, 1)
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"CircuitBreaker name {name!r} must be a non-empty string")
        self.name = name
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metrics = metrics
        self._lock = threading.Lock()
        self._state = CLOSED
        self._consecutive = 0
        self._calls: deque[bool] = deque(maxlen=self.window)  # True = failed
        self._opened_at_us = 0
        self._in_flight = 0

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open`` (open turns half open only when a caller asks)."""
        return self._state

    def allow(self) -> bool:
        """May a store call go ahead now? False means: answer by the failure mode."""
        with self._lock:
            if self._state == CLOSED:
                return True
            if self._state == OPEN:
                if self._clock.now_us() - self._opened_at_us < self._cooldown_us:
                    return False
                self._move(HALF_OPEN)
            if self._in_flight >= self.probes:
                return False
            self._in_flight += 1
            return True

    def retry_in(self) -> float:
        """Seconds until the next probe may go (0 unless open); a hint for denied callers."""
        with self._lock:
            if self._state != OPEN:
                return 0.0
            return max(0, self._opened_at_us + self._cooldown_us - self._clock.now_us()) / 1e6

    def success(self) -> None:
        """The call allowed by ``allow()`` got an answer from the store."""
        with self._lock:
            self._consecutive = 0
            if self._state == HALF_OPEN:
                self._in_flight = 0
                self._calls.clear()
                self._move(CLOSED)
                return
            self._calls.append(False)

    def failure(self) -> None:
        """The call allowed by ``allow()`` failed (unavailable, timed out, refused)."""
        with self._lock:
            if self._state == HALF_OPEN:
                self._open()
                return
            if self._state == OPEN:
                return  # a call let through before it opened, reporting late
            self._consecutive += 1
            self._calls.append(True)
            if self._consecutive >= self.failures or self._ratio_exceeded():
                self._open()

    def recovered(self) -> None:
        """An out-of-band check (a health ping) found the store answering: close now.

        Does nothing unless open or half open. Saves callers the rest of the
        cool-down when something else already probed the store.
        """
        with self._lock:
            if self._state == CLOSED:
                return
            self._in_flight = 0
            self._consecutive = 0
            self._calls.clear()
            self._move(CLOSED)

    def abandon(self) -> None:
        """The call allowed by ``allow()`` ended without a verdict (cancelled, or a bug)."""
        with self._lock:
            if self._state == HALF_OPEN:
                self._in_flight = max(0, self._in_flight - 1)

    def _ratio_exceeded(self) -> bool:
        if self.failure_ratio is None or len(self._calls) < self.min_calls:
            return False
        return sum(self._calls) >= self.failure_ratio * len(self._calls)

    def _open(self) -> None:
        self._opened_at_us = self._clock.now_us()
        self._in_flight = 0
        self._consecutive = 0
        self._calls.clear()
        self._move(OPEN)

    def _move(self, state: str) -> None:
        # Called under the lock. A re-open from half open is a transition too.
        self._state = state
        self._metrics.breaker(name=self.name, state=state)

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(name={self.name!r}, state={self._state!r}, failures={self.failures}, "
            f"failure_ratio={self.failure_ratio}, cooldown={self.cooldown})"
        )
