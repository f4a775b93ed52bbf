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
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from ratewarden.budgets._twins import check_limiter
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import AsyncLimiter, DecisionCore, Flow, Lease, Limiter

__all__ = ["HeldSlot", "aheld_slot", "held_slot"]


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


def _renew_every(ttl: float, renew_every: float | None) -> float:
    every = ttl / 3 if renew_every is None else renew_every
    if isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every < ttl:
        raise ConfigurationError(
            f"renew_every {renew_every!r} must be seconds between 0 and the ttl ({ttl}); "
            "a third of the ttl (the default) survives one missed renewal"
        )
    return float(every)


def _check_ttl(ttl: float) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"slot ttl {ttl!r} must be a positive number of seconds")
    return float(ttl)


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
    the lease gone sets ``held.lost``.
    """
    check_limiter("held_slot", limiter, awaited=False, twin="aheld_slot (async with)")
    every = _renew_every(_check_ttl(ttl), renew_every)
    held = HeldSlot(limiter.acquire_slot(key, limit, slots=slots, ttl=ttl))
    stop = threading.Event()
    worker = None
    if held.allowed:
        worker = threading.Thread(
            target=_renew_loop, args=(limiter, held, stop, every), daemon=True
        )
        worker.start()
    try:
        yield held
    finally:
        stop.set()
        if worker is not None:
            worker.join(timeout=5.0)  # a renewal in flight is bounded by the store timeout
        limiter.release_slot(held.lease)


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
    """The asyncio twin of ``held_slot``: an asyncio task renews the lease."""
    check_limiter("aheld_slot", limiter, awaited=True, twin="held_slot (with)")
    every = _renew_every(_check_ttl(ttl), renew_every)
    held = HeldSlot(await limiter.acquire_slot(key, limit, slots=slots, ttl=ttl))
    task = asyncio.create_task(_arenew_loop(limiter, held, every)) if held.allowed else None
    try:
        yield held
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await limiter.release_slot(held.lease)


async def _arenew_loop(limiter: AsyncLimiter, held: HeldSlot, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(StorageError):  # a store error: retried at the next tick
            if not await limiter.run(_renewal(limiter, held)):
                return
