"""Concurrency slots held for as long as the work runs: renewed in the background.

``Limiter.slot`` holds a lease for at most its TTL. A streaming LLM response
can run for minutes, longer than any TTL short enough to recover a crashed
worker's slots quickly. ``held_slot`` (and ``aheld_slot`` for asyncio) keep a
short TTL and renew it every ``renew_every`` seconds while the block runs, so
a live holder keeps its slot and a killed one loses it one TTL later.

Renewal runs on real time (a thread, or an asyncio task): it protects real
streams. If a renewal finds the lease gone (it lapsed, say after a long pause
of this process), ``HeldSlot.lost`` is set and renewal stops; the block should
stop its stream. One renewal is a flow written once (``_renewal``) over the
limiter's ``renew_slot_flow``; the thread and the task each run it on their tick.

The lease id is made here, before the acquire is sent, so an acquire that is
cancelled (or interrupted: KeyboardInterrupt) while the store decides is given
back by id: its script may run all the same, and nothing else would ever
release that slot before its TTL (``given_back_if_cancelled`` /
``given_back_if_interrupted``; the fleet shedder's acquire uses them too). A
release that fails on the way out of a block that raised is a note on the
block's exception, which goes on: the slot comes back when its TTL runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ratewarden.budgets._twins import check_limiter, undo_cancelled
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import (
    AsyncLimiter,
    DecisionCore,
    Flow,
    Lease,
    Limiter,
    lease_ttl_us,
    release_by_id,
)

__all__ = [
    "MIN_RENEW_EVERY",
    "HeldSlot",
    "aheld_slot",
    "areleased_after",
    "given_back_if_cancelled",
    "given_back_if_interrupted",
    "held_slot",
    "release_by_id",
    "released_after",
]

T = TypeVar("T")

#: The shortest renewal interval, in seconds: 100 renewals a second per slot at most. Less
#: is a unit mistake (milliseconds given as seconds) that turns renewal into a busy loop.
MIN_RENEW_EVERY = 0.01


@dataclass
class HeldSlot:
    """The lease of a ``held_slot`` block; ``lost`` is set when a renewal found it gone."""

    lease: Lease
    lost: threading.Event = field(default_factory=threading.Event)
    renewals: int = 0

    @property
    def allowed(self) -> bool:
        return self.lease.allowed

    def __bool__(self) -> bool:
        return self.lease.allowed


def _renew_every(owner: str, ttl: float, renew_every: float | None) -> float:
    every = ttl / 3 if renew_every is None else renew_every
    if isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every < ttl:
        raise ConfigurationError(
            f"{owner}: renew_every {renew_every!r} must be seconds between 0 and the ttl "
            f"({ttl}); a third of the ttl (the default) survives one missed renewal"
        )
    if every < MIN_RENEW_EVERY:
        given = f"renew_every {every!r}" if renew_every is not None else f"ttl {ttl!r}"
        raise ConfigurationError(
            f"{owner}: {given} renews every {every:.3g} s, under the least of "
            f"{MIN_RENEW_EVERY} s (a busy loop against the store; were milliseconds given as "
            f"seconds?): give renew_every of at least {MIN_RENEW_EVERY}, and a ttl of at "
            f"least {3 * MIN_RENEW_EVERY:g} for the default (a third of it)"
        )
    return float(every)


def _checked(owner: str, ttl: float, renew_every: float | None) -> float:
    """The renewal interval, once ``ttl`` (a lease's: 1 ms to a year) and it are checked."""
    try:
        lease_ttl_us(ttl)
    except ConfigurationError as error:
        raise ConfigurationError(f"{owner}: {error}") from None
    return _renew_every(owner, float(ttl), renew_every)


def given_back_if_interrupted(acquire: Callable[[], T], give_back: Callable[[], object]) -> T:
    """``acquire()``; if a KeyboardInterrupt (any BaseException but an Exception) ends it,
    ``give_back()`` (errors ignored: the TTL frees the slot) before it goes on. An Exception
    is the acquire's answer (a store failure, bad input) and goes on as it is."""
    try:
        return acquire()
    except Exception:
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            give_back()
        raise


async def given_back_if_cancelled(
    acquiring: Awaitable[T], give_back: Callable[[], Coroutine[Any, Any, object]], what: str
) -> T:
    """Await ``acquiring``; if the caller is cancelled meanwhile, ``give_back()`` runs,
    shielded and waited for at most ``UNDO_WAIT`` (``undo_cancelled``), before the
    CancelledError goes on."""
    try:
        return await acquiring
    except asyncio.CancelledError:
        await undo_cancelled(what, give_back())
        raise


def released_after(owner: str, raised: BaseException, release: Callable[[], object]) -> None:
    """``release()`` on the way out of a block that raised ``raised``: a StorageError it
    raises becomes a note on ``raised`` (which goes on), not the exception the caller sees."""
    try:
        release()
    except StorageError as error:
        raised.add_note(_failed(owner, error))


async def areleased_after(
    owner: str, raised: BaseException, release: Callable[[], Coroutine[Any, Any, object]]
) -> None:
    """``released_after``, awaited; a cancelled block's release is an ``undo_cancelled``
    (shielded from a second cancel, bounded, a failure logged)."""
    if isinstance(raised, asyncio.CancelledError):
        await undo_cancelled(f"the slot of a cancelled {owner}", release())
        return
    try:
        await release()
    except StorageError as error:
        raised.add_note(_failed(owner, error))


def _failed(owner: str, error: Exception) -> str:
    return (
        f"{owner}: releasing the slot also failed ({error!r}); it is free again when its "
        "ttl runs out"
    )


@contextlib.contextmanager
def held_slot(
    limiter: Limiter,
    key: str,
    limit: int,
    *,
    slots: int = 1,
    ttl: float = 10.0,
    renew_every: float | None = None,
) -> Iterator[HeldSlot]:
    """``with held_slot(limiter, "gpu", 8) as held:`` — renewed while inside, released on exit.

    Yields whether or not the slot was granted (check ``held``). A renewal
    that fails on a store error is retried at the next tick; one that finds
    the lease gone sets ``held.lost``. If the block raised and the release
    fails too, the block's exception goes on, with a note saying so.
    """
    check_limiter("held_slot", limiter, awaited=False, twin="aheld_slot (async with)")
    every = _checked("held_slot", ttl, renew_every)
    lease_id = uuid.uuid4().hex
    lease = given_back_if_interrupted(
        lambda: limiter.acquire_slot(key, limit, slots=slots, ttl=ttl, lease_id=lease_id),
        lambda: limiter.run(release_by_id(limiter, key, lease_id)),
    )
    held = HeldSlot(lease)
    stop = threading.Event()
    worker = None
    if held.allowed:
        worker = threading.Thread(
            target=_renew_loop, args=(limiter, held, stop, every), daemon=True
        )
        worker.start()
    try:
        yield held
    except BaseException as raised:
        _stop_thread(stop, worker)
        released_after("held_slot", raised, lambda: limiter.release_slot(held.lease))
        raise
    _stop_thread(stop, worker)
    limiter.release_slot(held.lease)


def _stop_thread(stop: threading.Event, worker: threading.Thread | None) -> None:
    stop.set()
    if worker is not None:
        worker.join(timeout=5.0)  # a renewal in flight is bounded by the store timeout


def _renewal(limiter: DecisionCore, held: HeldSlot) -> Flow[bool]:
    """Renew ``held``'s lease once: False (and ``held.lost`` set) when it was found gone."""
    if not (yield from limiter.renew_slot_flow(held.lease)):
        held.lost.set()
        return False
    held.renewals += 1
    return True


def _renew_loop(limiter: Limiter, held: HeldSlot, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        with contextlib.suppress(StorageError):  # a store error: retried at the next tick
            if not limiter.run(_renewal(limiter, held)):
                return


@contextlib.asynccontextmanager
async def aheld_slot(
    limiter: AsyncLimiter,
    key: str,
    limit: int,
    *,
    slots: int = 1,
    ttl: float = 10.0,
    renew_every: float | None = None,
) -> AsyncIterator[HeldSlot]:
    """The asyncio twin of ``held_slot``: an asyncio task renews the lease. A block that is
    cancelled releases its slot shielded from a second cancel."""
    check_limiter("aheld_slot", limiter, awaited=True, twin="held_slot (with)")
    every = _checked("aheld_slot", ttl, renew_every)
    lease_id = uuid.uuid4().hex
    lease = await given_back_if_cancelled(
        limiter.acquire_slot(key, limit, slots=slots, ttl=ttl, lease_id=lease_id),
        lambda: limiter.run(release_by_id(limiter, key, lease_id)),
        f"the slot on {key!r} that a cancelled aheld_slot was acquiring",
    )
    held = HeldSlot(lease)
    task = asyncio.create_task(_arenew_loop(limiter, held, every)) if held.allowed else None
    try:
        yield held
    except BaseException as raised:
        if task is not None:
            task.cancel()
        await areleased_after("aheld_slot", raised, lambda: limiter.release_slot(held.lease))
        await _stop_task(task)
        raise
    await _stop_task(task)
    await limiter.release_slot(held.lease)


async def _stop_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.wait({task})  # a cancel of the caller meanwhile goes on


async def _arenew_loop(limiter: AsyncLimiter, held: HeldSlot, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(StorageError):  # a store error: retried at the next tick
            if not await limiter.run(_renewal(limiter, held)):
                return
