"""Helpers for testing code that uses ratewarden.

``ManualClock`` replaces sleeping: hand it to a store (``MemoryStore(clock=c)`` or
``RedisStore(client, clock=c)``) and move time with ``advance``. ``sleep`` on a
manual clock advances it, so ``Limiter.acquire`` returns at once in tests.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta

from ratewarden.checks import init_checked, keywords_checked
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError

__all__ = ["DecisionRecorder", "ManualClock", "RecordedDecision"]


class ManualClock:
    """A clock that moves only when told to. Thread-safe.

    ``ManualClock(start_epoch_seconds)`` starts at that instant (1,700,000,000 by
    default, a fixed date in November 2023, so test output is reproducible).
    """

    __slots__ = ("_lock", "_now_us")

    @keywords_checked
    def __init__(self, start_epoch_seconds: float = 1_700_000_000.0) -> None:
        if start_epoch_seconds < 0:
            raise ConfigurationError(
                f"ManualClock start {start_epoch_seconds!r} is negative; "
                "pass seconds since the epoch"
            )
        self._lock = threading.Lock()
        self._now_us = round(start_epoch_seconds * 1_000_000)

    def now(self) -> float:
        return self._now_us / 1_000_000

    def now_us(self) -> int:
        return self._now_us

    def advance(self, seconds: float | timedelta) -> None:
        """Move time forward by ``seconds`` (rounded to the microsecond)."""
        step = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        if step < 0:
            raise ConfigurationError(f"ManualClock.advance({step!r}): time only moves forward")
        with self._lock:
            self._now_us += round(step * 1_000_000)

    def advance_us(self, microseconds: int) -> None:
        """Move time forward by a whole number of microseconds."""
        if microseconds < 0:
            raise ConfigurationError(
                f"ManualClock.advance_us({microseconds!r}): time only moves forward"
            )
        with self._lock:
            self._now_us += microseconds

    def set(self, epoch_seconds: float) -> None:
        """Jump to an absolute instant (forward or backward, to test clock steps)."""
        with self._lock:
            self._now_us = round(epoch_seconds * 1_000_000)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def __repr__(self) -> str:
        return f"ManualClock({self.now()!r})"


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    algorithm: str
    key: str
    decision: Decision


@init_checked
@dataclass
class DecisionRecorder:
    """An ``on_decision`` hook that keeps every decision, for assertions in tests.

    ``Limiter(store, on_decision=recorder)``; then ``recorder.denied`` counts
    enforced denials and ``recorder.shadowed`` the denials shadow mode let through.
    """

    records: list[RecordedDecision] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __call__(self, algorithm: str, key: str, decision: Decision) -> None:
        with self._lock:
            self.records.append(RecordedDecision(algorithm, key, decision))

    @property
    def allowed(self) -> int:
        return sum(r.decision.allowed and not r.decision.shadowed for r in self.records)

    @property
    def denied(self) -> int:
        return sum(not r.decision.allowed for r in self.records)

    @property
    def shadowed(self) -> int:
        return sum(r.decision.shadowed for r in self.records)

    def keys(self) -> list[str]:
        """Keys in the order they were decided."""
        return [r.key for r in self.records]
