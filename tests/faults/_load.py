"""Steady, bounded load for the fault tests, and the figures each phase of it produced.

Every call is timed with ``time.monotonic``. A call must either return a
``Decision`` or raise ``StorageUnavailableError`` within ``BOUND_S`` (four store
timeouts plus 50 ms: a hang check, not a speed check); any other exception fails
the test. The figures of every phase are kept in ``REPORT`` and printed at the
end of the run (see conftest.py), which is where docs/reliability.md gets them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ratewarden.decision import Decision
from ratewarden.errors import StorageUnavailableError

#: The store timeout every fault test uses (seconds). 100 ms rather than the
#: 20 ms default: on a shared 2-core CI machine a healthy call now and then took
#: over 50 ms, which would read as a fault where there was none.
TIMEOUT = 0.1
#: The longest a call may take: a hit needs at most three bounded round trips
#: (EVALSHA, SCRIPT LOAD after a flush, EVALSHA again), a reconnect adds the
#: connection's own handshake read, plus scheduling slack on a shared machine
#: (one call under 200 ms of latency was measured at 223 ms with a 50 ms timeout;
#: with eight other jobs on the 2 cores, healthy calls were starved for 0.45-1.2 s).
#: A hang is what this catches: a call stuck until the fault ends, or forever.
BOUND_S = TIMEOUT * 4 + 0.5


@dataclass(slots=True)
class Phase:
    """What one phase of load saw."""

    test: str
    name: str
    calls: int = 0
    decided: int = 0
    allowed: int = 0
    unavailable: int = 0
    worst_s: float = 0.0
    #: Hits Redis applied although the caller got StorageUnavailableError (measured
    #: from the counter afterwards; None when the test does not measure it).
    charged_unanswered: int | None = None

    def record(self, started: float, outcome: Decision | BaseException) -> None:
        elapsed = time.monotonic() - started
        self.calls += 1
        self.worst_s = max(self.worst_s, elapsed)
        if isinstance(outcome, Decision):
            self.decided += 1
            self.allowed += outcome.allowed
        elif isinstance(outcome, StorageUnavailableError):
            self.unavailable += 1
        else:
            raise AssertionError(f"{self.test}/{self.name}: unexpected {outcome!r}") from outcome
        assert elapsed < BOUND_S, f"{self.test}/{self.name}: a call took {elapsed:.3f} s"


#: A call of the load, and the same on an asyncio store.
Call = Callable[[], Decision]
AsyncCall = Callable[[], Awaitable[Decision]]
#: Whether a phase goes on, given what it has seen so far.
Going = Callable[[Phase], bool]

#: Every phase run in this session, in order.
REPORT: list[Phase] = []


def _phase(test: str, name: str) -> Phase:
    phase = Phase(test, name)
    REPORT.append(phase)
    return phase


@contextmanager
def _timed(phase: Phase) -> Iterator[list[Decision]]:
    """Time one call and record its outcome in ``phase``: the Decision the block appends, or
    the exception it raised (recorded; anything unexpected then fails the test)."""
    started = time.monotonic()
    decided: list[Decision] = []
    try:
        yield decided
    except Exception as exc:
        phase.record(started, exc)
    else:
        phase.record(started, decided[0])


async def _atimed(phase: Phase, call: AsyncCall) -> None:
    with _timed(phase) as decided:
        decided.append(await call())


def run(test: str, name: str, call: Call, count: int) -> Phase:
    """``count`` calls one after another."""
    phase = _phase(test, name)
    for _ in range(count):
        with _timed(phase) as decided:
            decided.append(call())
    return phase


async def arun(test: str, name: str, call: AsyncCall, count: int, concurrency: int) -> Phase:
    """``count`` calls, ``concurrency`` of them in flight at a time."""
    phase = _phase(test, name)
    for first in range(0, count, concurrency):
        batch = min(concurrency, count - first)
        await asyncio.gather(*(_atimed(phase, call) for _ in range(batch)))
    return phase


def run_while(
    test: str, name: str, call: Call, going: Going, most: int, pause: float = 0.002
) -> Phase:
    """Calls one after another while ``going(phase)``, ``pause`` s apart, at most ``most``."""
    phase = _phase(test, name)
    while going(phase):
        assert phase.calls < most, f"{test}/{name}: still going after {most} calls"
        with _timed(phase) as decided:
            decided.append(call())
        time.sleep(pause)
    return phase


async def arun_while(
    test: str,
    name: str,
    call: AsyncCall,
    going: Going,
    most: int,
    concurrency: int,
    pause: float = 0.002,
) -> Phase:
    """Batches of ``concurrency`` calls while ``going(phase)``, ``pause`` s apart."""
    phase = _phase(test, name)
    while going(phase):
        assert phase.calls < most, f"{test}/{name}: still going after {most} calls"
        await asyncio.gather(*(_atimed(phase, call) for _ in range(concurrency)))
        await asyncio.sleep(pause)
    return phase
