"""SyncTask: an AsyncReconciledBudget's rounds in an asyncio task, started, stopped, cancelled.

The task waits between rounds on a ``GateClock``: each wait is recorded, and
returns when the test says so, moving a ManualClock by the wait. No test waits
for real time to pass but the one on the event loop's own clock.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.regions import AsyncReconciledBudget, SyncReport, SyncTask
from ratewarden.storage.regions import AsyncRegionStore
from ratewarden.testing import ManualClock
from tests.faults._proxy import Fault
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
GLOBAL = Rate.parse("600/minute")
START = 1_700_000_040.0


class GateClock:
    """``clock`` for a SyncTask: ``asleep`` records each wait and returns on ``tick()``, the
    ManualClock moved by the wait."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self._sleeping = asyncio.Event()
        self._go = asyncio.Event()

    def now(self) -> float:
        return self.clock.now()

    def now_us(self) -> int:
        return self.clock.now_us()

    def sleep(self, seconds: float) -> None:
        raise AssertionError("a SyncTask never blocks")

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self._sleeping.set()
        await self._go.wait()
        self._go.clear()
        self.clock.advance(seconds)

    async def sleeping(self) -> None:
        """Until the task waits between rounds (the round before, if any, is over)."""
        await asyncio.wait_for(self._sleeping.wait(), 5)
        self._sleeping.clear()

    def tick(self) -> None:
        """End the current wait: the next round starts."""
        self._go.set()


class RoundTime(Metrics):
    """Makes every round take ``seconds`` of the clock (moved as the round reports)."""

    def __init__(self, clock: ManualClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds

    def region_overshoot(self, *, region: str, requests: int) -> None:
        self.clock.advance(self.seconds)


class HeldBudget(AsyncReconciledBudget):
    """A budget whose rounds wait for ``release`` (and then raise ``error``, if set)."""

    entered: asyncio.Event
    release: asyncio.Event
    error: Exception | None = None

    async def sync(self) -> SyncReport:  # type: ignore[override]
        self.entered.set()
        await self.release.wait()
        if self.error is not None:
            raise self.error
        report: SyncReport = await super().sync()
        return report


def _budget(
    regions: dict[str, Region],
    clock: ManualClock,
    kind: type[AsyncReconciledBudget] = AsyncReconciledBudget,
    *,
    through_link: bool = False,
    **options: Any,
) -> Any:
    us = regions["us"]
    local = us.aremote(0.2, retries=0) if through_link else us.alocal()
    budget = kind(
        "us",
        AsyncRegionStore(local, clock=clock, timeout=0.5),
        {n: AsyncRegionStore(r.aremote()) for n, r in regions.items() if n != "us"},
        RATES,
        sync_interval=options.pop("sync_interval", 1.0),
        replication_lag=1.0,
        **options,
    )
    if isinstance(budget, HeldBudget):
        budget.entered, budget.release = asyncio.Event(), asyncio.Event()
    return budget


async def _close(budget: AsyncReconciledBudget) -> None:
    for store in (budget.local, *budget.peers.values()):
        await store.aclose()
        await store.client.aclose()


async def test_rounds_start_every_interval_however_long_one_takes(
    regions: dict[str, Region],
) -> None:
    """Rounds taking 0.3 s of a 1 s interval: the task waits 1 s, then 0.7 s after each round,
    and a round past the interval is followed at once; every round is counted and complete."""
    clock = ManualClock(START)
    gate = GateClock(clock)
    metrics = RoundTime(clock, 0.3)
    budget = _budget(regions, clock, metrics=metrics)
    assert (await budget.hit("tenant-a", GLOBAL)).allowed
    sync = SyncTask(budget, clock=gate).start()
    try:
        for _ in range(3):
            await gate.sleeping()
            gate.tick()
        await gate.sleeping()
        metrics.seconds = 1.5
        gate.tick()
        await gate.sleeping()
        assert gate.waits == pytest.approx([1.0, 0.7, 0.7, 0.7, 0.0])
        assert (sync.rounds, sync.complete_rounds) == (4, 4)
        # eu and ap run no rounds here: past 2 intervals + the lag, their budgets are held.
        assert sync.last == SyncReport(1, True, False, (), 0, ("eu", "ap"))
        await asyncio.wait_for(sync.stop(), 1)  # at once: the wait is cut short
        assert sync.task is not None and sync.task.cancelled()
        assert sync.rounds == 4, "a stop between rounds runs no other round"
    finally:
        await _close(budget)


async def test_stop_mid_round_lets_the_round_finish(regions: dict[str, Region]) -> None:
    """stop() during a round waits for it: the round completes and is counted, then the task
    ends by itself (not cancelled)."""
    clock = ManualClock(START)
    gate = GateClock(clock)
    budget = _budget(regions, clock, HeldBudget)
    sync = SyncTask(budget, clock=gate).start()
    try:
        await gate.sleeping()
        gate.tick()
        await asyncio.wait_for(budget.entered.wait(), 5)
        stopping = asyncio.create_task(sync.stop())
        await asyncio.sleep(0)
        assert not stopping.done()
        budget.release.set()
        await asyncio.wait_for(stopping, 5)
        assert sync.task is not None and not sync.task.cancelled()
        assert (sync.rounds, sync.complete_rounds) == (1, 1)
        assert gate.waits == [1.0], "no wait after the round a stop came in"
    finally:
        await _close(budget)


async def test_stop_cancels_a_round_that_outlasts_its_timeout(regions: dict[str, Region]) -> None:
    """A round still running when stop()'s timeout ends is cancelled, and not counted."""
    clock = ManualClock(START)
    gate = GateClock(clock)
    budget = _budget(regions, clock, HeldBudget)
    sync = SyncTask(budget, clock=gate).start()
    try:
        await gate.sleeping()
        gate.tick()
        await asyncio.wait_for(budget.entered.wait(), 5)
        await sync.stop(timeout=0.01)
        assert sync.task is not None and sync.task.cancelled()
        assert sync.rounds == 0
    finally:
        await _close(budget)


async def test_cancelling_the_task_ends_the_rounds(regions: dict[str, Region]) -> None:
    """Cancelling ``task`` mid-round ends it; stop() afterwards returns quietly."""
    clock = ManualClock(START)
    gate = GateClock(clock)
    budget = _budget(regions, clock, HeldBudget)
    sync = SyncTask(budget, clock=gate).start()
    try:
        await gate.sleeping()
        gate.tick()
        await asyncio.wait_for(budget.entered.wait(), 5)
        assert sync.task is not None
        sync.task.cancel()
        await asyncio.wait({sync.task})
        assert sync.task.cancelled() and sync.rounds == 0
        await sync.stop()
    finally:
        await _close(budget)


async def test_a_failing_round_is_logged_and_the_rounds_go_on(
    regions: dict[str, Region], caplog: pytest.LogCaptureFixture
) -> None:
    """This region's Redis down: the round fails, is logged and counted, and recomputes
    nothing; the next interval's round, once Redis is back, completes."""
    clock = ManualClock(START)
    gate = GateClock(clock)
    budget = _budget(regions, clock, through_link=True)
    assert (await budget.hit("tenant-b", GLOBAL)).allowed
    regions["us"].link.set_fault(Fault.RESET)
    sync = SyncTask(budget, clock=gate).start()
    try:
        with caplog.at_level(logging.WARNING, logger="ratewarden.regions"):
            await gate.sleeping()
            gate.tick()
            await gate.sleeping()
        assert (sync.rounds, sync.complete_rounds, sync.last) == (1, 0, None)
        assert "region us: sync round failed: Redis at" in caplog.text
        regions["us"].link.set_fault(Fault.NONE)
        gate.tick()
        await gate.sleeping()
        assert (sync.rounds, sync.complete_rounds) == (2, 1)
        assert sync.last == SyncReport(1, True, False, (), 0)
        await sync.stop()
    finally:
        regions["us"].link.set_fault(Fault.NONE)
        await _close(budget)


async def test_an_unexpected_error_ends_the_task_and_is_raised_by_stop(
    regions: dict[str, Region],
) -> None:
    """A round raising what no store raises (a bug) ends the task; stop() raises it."""
    clock = ManualClock(START)
    gate = GateClock(clock)
    budget = _budget(regions, clock, HeldBudget)
    budget.error = ValueError("not a storage error")
    budget.release.set()
    sync = SyncTask(budget, clock=gate).start()
    try:
        await gate.sleeping()
        gate.tick()
        assert sync.task is not None
        await asyncio.wait({sync.task}, timeout=5)
        with pytest.raises(ValueError, match="not a storage error"):
            await sync.stop()
    finally:
        await _close(budget)


async def test_async_with_runs_rounds_on_the_loops_clock(regions: dict[str, Region]) -> None:
    """Without a clock the task waits on the event loop's time: rounds every 10 ms of it,
    started by ``async with`` and stopped at its end; a SyncTask starts once."""
    clock = ManualClock(START)
    budget = _budget(regions, clock, sync_interval=0.01)
    try:
        async with SyncTask(budget) as sync:
            with pytest.raises(RuntimeError, match="started already"):
                sync.start()
            async with asyncio.timeout(5):
                while sync.complete_rounds < 3:
                    await asyncio.sleep(0.005)
        assert sync.task is not None and sync.task.done()
        rounds = sync.rounds
        await asyncio.sleep(0.03)
        assert sync.rounds == rounds
    finally:
        await _close(budget)


def test_a_sync_task_starts_only_on_a_running_loop(regions: dict[str, Region]) -> None:
    """start() outside a coroutine: RuntimeError, and nothing runs."""
    budget = _budget(regions, ManualClock(START))
    sync = SyncTask(budget)
    with pytest.raises(RuntimeError, match="no running event loop"):
        sync.start()
    assert sync.task is None
