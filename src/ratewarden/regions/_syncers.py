"""SyncThread / SyncTask: a reconciled budget's rounds, every ``sync_interval``.

``SyncThread`` runs ``budget.sync()`` in a daemon thread, ``SyncTask`` awaits
``budget.sync()`` in an asyncio task. Both start a round every interval,
however long the last one took (the bound assumes so), and log a failed round
(this region's Redis down) and go on: caps are then not recomputed, so the
budget does not grow. An unexpected error (not a ``RatewardenError``: a bug) ends
the rounds: it is logged at once, as an error naming the region, and ``stop()``
raises it. The round itself is the budget's (``Reconciler``).

Each takes its own twin of the budget and refuses the other's, naming the syncer to use.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING

from ratewarden.checks import keywords_checked
from ratewarden.errors import ConfigurationError, RatewardenError
from ratewarden.regions._reconcile import AsyncReconciledBudget, ReconciledBudget
from ratewarden.regions._rounds import round_error

if TYPE_CHECKING:
    from ratewarden.clock import Clock
    from ratewarden.regions._reconcile import SyncReport

__all__ = ["SyncTask", "SyncThread"]

log = logging.getLogger("ratewarden.regions")


def _checked(caller: str, budget: object, *, awaited: bool) -> None:
    """Refuse anything but the budget twin ``caller`` runs, naming the syncer of the other."""
    wanted, other, twin = (
        (AsyncReconciledBudget, ReconciledBudget, "SyncThread")
        if awaited
        else (ReconciledBudget, AsyncReconciledBudget, "SyncTask")
    )
    if isinstance(budget, wanted):
        return
    if isinstance(budget, other):
        raise ConfigurationError(
            f"{caller} runs the rounds of {wanted.__name__}, not of {other.__name__}: "
            f"use {twin}(budget) for it"
        )
    raise ConfigurationError(
        f"{caller} takes {'an' if awaited else 'a'} {wanted.__name__}, not {budget!r} "
        f"({type(budget).__name__})"
    )


def _stopped(region: str, exc: BaseException) -> None:
    """Log the unexpected error that ended ``region``'s rounds."""
    log.error(
        "region %s: sync rounds stopped by an unexpected error (%s: %s); no more rounds run, "
        "so its peers hold it at its budget",
        region,
        type(exc).__name__,
        exc,
        exc_info=exc,
        extra={"event": "region_sync_stopped", "region": region},
    )


class SyncThread:
    """Runs ``budget.sync()`` every ``sync_interval`` seconds of real time in a daemon thread.

    A round that fails (this region's Redis down) is logged and retried at the
    next interval; caps are then not recomputed, so the budget does not grow. An
    unexpected error ends the thread, logged as an error (``region_sync_stopped``);
    ``stop()`` raises it. Refuses an ``AsyncReconciledBudget`` (``SyncTask`` runs those).
    """

    @keywords_checked
    def __init__(self, budget: ReconciledBudget) -> None:
        _checked("SyncThread", budget, awaited=False)
        self.budget = budget
        #: The unexpected error that ended the rounds, if one did.
        self.error: BaseException | None = None
        #: Rounds run, and those that recomputed the caps (every peer answered in time).
        self.rounds = 0
        self.complete_rounds = 0
        self.last: SyncReport | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"ratewarden-sync-{budget.region}", daemon=True
        )

    def start(self) -> SyncThread:
        """Start the rounds; returns self."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the current round (waiting at most ``timeout`` seconds); raises the
        unexpected error that ended the rounds, if one did."""
        self._stop.set()
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join(timeout)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        interval = self.budget.sync_interval
        wait = interval
        while not self._stop.wait(wait):
            started = time.monotonic()
            try:
                self.last = self.budget.sync()
                self.complete_rounds += self.last.complete
            except RatewardenError as exc:
                log.warning(
                    "region %s: sync round failed: %s; the cap stays as it was",
                    self.budget.region,
                    round_error(exc),
                )
            except Exception as exc:
                self.error = exc
                _stopped(self.budget.region, exc)
                return
            self.rounds += 1
            # Rounds start every interval, however long one took (the bound assumes so).
            wait = max(0.0, interval - (time.monotonic() - started))

    def __enter__(self) -> SyncThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SyncTask:
    """The asyncio twin of ``SyncThread``: awaits ``budget.sync()`` every ``sync_interval``
    seconds in a task of the running event loop.

    ``start()`` (in a coroutine) makes the task; ``await stop()`` ends it after
    the current round, or at once between rounds; ``async with SyncTask(budget):``
    does both. Cancelling ``task`` ends it too, mid-round if need be: what the
    round had sent stands (each of its scripts is atomic), and nothing more is sent.
    ``clock`` is what it waits on between rounds: the event loop's time by
    default; tests give one whose ``asleep`` they control.
    """

    @keywords_checked
    def __init__(self, budget: AsyncReconciledBudget, *, clock: Clock | None = None) -> None:
        _checked("SyncTask", budget, awaited=True)
        self.budget = budget
        #: Rounds run, and those that recomputed the caps (every peer answered in time).
        self.rounds = 0
        self.complete_rounds = 0
        self.last: SyncReport | None = None
        #: The task running the rounds, once started.
        self.task: asyncio.Task[None] | None = None
        self._clock = clock
        self._stopping = False
        self._between = False

    def start(self) -> SyncTask:
        """Start the rounds in a task of the running loop; returns self."""
        if self.task is not None:
            raise RuntimeError(f"{self!r} was started already; make a new one")
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._run(), name=f"ratewarden-sync-{self.budget.region}")
        return self

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop after the current round (waiting at most ``timeout`` seconds, then cancelling
        it); at once between rounds. A round's unexpected error is raised here."""
        self._stopping = True
        task = self.task
        if task is None:
            return
        if self._between:
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def _run(self) -> None:
        interval = self.budget.sync_interval
        wait = interval
        while True:
            self._between = True
            await self._sleep(wait)
            self._between = False
            if self._stopping:
                return
            started = self._now()
            try:
                self.last = await self.budget.sync()
                self.complete_rounds += self.last.complete
            except RatewardenError as exc:
                log.warning(
                    "region %s: sync round failed: %s; the cap stays as it was",
                    self.budget.region,
                    round_error(exc),
                )
            except Exception as exc:
                _stopped(self.budget.region, exc)
                raise
            self.rounds += 1
            if self._stopping:
                return
            # Rounds start every interval, however long one took (the bound assumes so).
            wait = max(0.0, interval - (self._now() - started))

    def _now(self) -> float:
        if self._clock is None:
            return asyncio.get_running_loop().time()
        return self._clock.now()

    async def _sleep(self, seconds: float) -> None:
        if self._clock is None:
            await asyncio.sleep(seconds)
            return
        await self._clock.asleep(seconds)
        # A clock whose asleep returns at once (ManualClock) still lets the loop run.
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"SyncTask(region={self.budget.region!r}, rounds={self.rounds})"

    async def __aenter__(self) -> SyncTask:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
