"""Helpers for testing code that uses ratewarden.

``ManualClock`` replaces sleeping: hand it to a store (``MemoryStore(clock=c)`` or
``RedisStore(client, clock=c)``) and move time with ``advance``. ``sleep`` on a
manual clock advances it, so ``Limiter.acquire`` returns at once in tests.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from ratewarden.checks import init_checked, is_number, keywords_checked
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, shown
from ratewarden.rate import MAX_PERIOD_US

__all__ = ["DecisionRecorder", "ManualClock", "RecordedDecision"]


#: The latest instant a ManualClock reaches, in microseconds (2155-06-28): a state holds
#: instants up to ``rate.MAX_PERIOD_US`` ahead, exact on Redis only below 2**53.
_LATEST_US = 2**53 - 1 - MAX_PERIOD_US


def _past_latest(seconds: float) -> str:
    """Why the instant ``seconds`` from the epoch (the one asked for) is refused."""
    if seconds < 1e15:
        at = f"{seconds:,.6f}".rstrip("0").rstrip(".")
    elif seconds < 1e308:
        at = f"{seconds:.3g}"
    else:  # an int past a float's range too: 10**400
        at = "more than 1e+308"
    return (
        f"{at} s from the epoch is past {_LATEST_US // 1_000_000:,} s (in 2155), the latest "
        "instant a state 100 years ahead stays below 2**53 microseconds, past which a Redis "
        "number is not exact"
    )


def _at_most(what: str, seconds: float, from_us: int = 0) -> int:
    """``from_us`` plus ``seconds`` in whole microseconds, refused (naming the instant that
    would be) when past any instant a clock reaches."""
    if seconds > (_LATEST_US - from_us) / 1_000_000:
        at = seconds if seconds >= 1e308 else from_us / 1_000_000 + seconds
        raise ConfigurationError(f"{what}: {_past_latest(at)}")
    return from_us + round(seconds * 1_000_000)


def _instant_us(where: str, what: str, seconds: object) -> int:
    """An instant in seconds from the epoch as whole microseconds, or a ConfigurationError."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(
            f"{where}: {what} {shown(seconds)} must be a number of seconds since the epoch"
        )
    if isinstance(seconds, float) and not math.isfinite(seconds):  # an int is: 10**400 too
        raise ConfigurationError(f"{where}: {what} {seconds!r} must be a finite number of seconds")
    if seconds < 0:
        raise ConfigurationError(
            f"{where}: {what} {shown(seconds)} is negative; pass seconds since the epoch"
        )
    return _at_most(f"{where}({shown(seconds)})", seconds)


class ManualClock:
    """A clock that moves only when told to. Thread-safe.

    ``ManualClock(start_epoch_seconds)`` starts at that instant (1,700,000,000 by
    default, a fixed date in November 2023, so test output is reproducible). Its time
    is a whole number of microseconds from the epoch up to ``_LATEST_US`` (in 2155):
    a state holds instants up to a rate's longest span (100 years) ahead, which stay
    below 2**53 microseconds, where a Redis number counts exactly, only until then.
    Anything else (a negative, non-finite or non-number instant, a float of
    microseconds) is a ``ConfigurationError`` that leaves the clock as it was.
    """

    __slots__ = ("_lock", "_now_us")

    @keywords_checked
    def __init__(self, start_epoch_seconds: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now_us = _instant_us("ManualClock", "start", start_epoch_seconds)

    def now(self) -> float:
        return self._now_us / 1_000_000

    def now_us(self) -> int:
        return self._now_us

    def advance(self, seconds: float | timedelta) -> None:
        """Move time forward by ``seconds`` (rounded to the microsecond)."""
        what = f"ManualClock.advance({shown(seconds)})"
        if isinstance(seconds, timedelta):
            step = seconds.total_seconds()
        elif isinstance(seconds, int | float) and not isinstance(seconds, bool):
            step = seconds
        else:
            raise ConfigurationError(f"{what}: give seconds (a number) or a timedelta")
        if isinstance(step, float) and not math.isfinite(step):  # an int is: 10**400 too
            raise ConfigurationError(f"{what}: give a finite number of seconds")
        if step < 0:
            raise ConfigurationError(f"{what}: time only moves forward")
        self._move(what, lambda now: _at_most(what, step, now))

    def advance_us(self, microseconds: int) -> None:
        """Move time forward by a whole number of microseconds."""
        what = f"ManualClock.advance_us({shown(microseconds)})"
        if isinstance(microseconds, bool) or not isinstance(microseconds, int):
            raise ConfigurationError(
                f"{what}: give a whole number of microseconds (an int; for seconds, "
                "advance(seconds) takes a float)"
            )
        if microseconds < 0:
            raise ConfigurationError(f"{what}: time only moves forward")
        self._move(what, lambda now: now + microseconds)

    def set(self, epoch_seconds: float) -> None:
        """Jump to an absolute instant (forward or backward, to test clock steps)."""
        now_us = _instant_us("ManualClock.set", "instant", epoch_seconds)
        with self._lock:
            self._now_us = now_us

    def _move(self, what: str, to: Callable[[int], int]) -> None:
        with self._lock:
            now_us = to(self._now_us)
            if now_us > _LATEST_US:
                at = now_us / 1_000_000 if now_us < 10**306 else math.inf
                raise ConfigurationError(f"{what}: {_past_latest(at)}")
            self._now_us = now_us

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds``; 0 or less returns at once, as ``SystemClock.sleep`` does (a
        computed wait may come out negative). Anything but a finite number of seconds is a
        ``ConfigurationError``: a real sleep could not take it either."""
        if _slept("sleep", seconds):
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        """``sleep`` for the asyncio twins (time jumps: nothing blocks, nothing is awaited)."""
        if _slept("asleep", seconds):
            self.advance(seconds)

    def __repr__(self) -> str:
        return f"ManualClock({self.now()!r})"


def _slept(method: str, seconds: object) -> bool:
    """Whether ``ManualClock.<method>(seconds)`` moves time (``seconds`` above 0)."""
    if not is_number(seconds, -math.inf):
        raise ConfigurationError(
            f"ManualClock.{method}({shown(seconds)}): give a finite number of seconds"
        )
    return seconds > 0


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
