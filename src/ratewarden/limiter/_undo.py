"""Giving back what a cancelled call may have taken: a slot acquire, a reservation.

A store call that is cancelled (``wait_for``, a task group, a client gone) or interrupted
(Ctrl-C) after its request left may still run on the store: a slot is then held by nobody
until its TTL, a reservation charged with no one to settle it. A caller that chose the
call's id before sending it can give it back by that id. ``undo_cancelled`` runs that
give-back shielded from a second cancel and waits for it a bounded time, so a hung store
cannot hold the cancellation up; ``release_by_id`` is the slot's give-back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from ratewarden.limiter._flows import Flow

__all__ = ["UNDO_WAIT", "given_back_if_interrupted", "release_by_id", "undo_cancelled"]

log = logging.getLogger("ratewarden.limiter")

#: Seconds a cancelled call waits for its undo before its CancelledError goes on; the
#: undo itself runs on (bounded by the store's own timeout).
UNDO_WAIT = 2.0

# Undos still running after their caller went on: kept here so they are not collected.
_UNDOING: set[asyncio.Future[Any]] = set()


async def undo_cancelled(
    what: str,
    undo: Coroutine[Any, Any, Any],
    *,
    wait: float | None = None,
    event: str = "undo_failed",
    logger: logging.Logger = log,
) -> None:
    """Run ``undo`` for a call being cancelled: shielded (a second cancel, as ``wait_for``
    and task groups send, does not stop it part-way) and waited for at most ``wait``
    seconds (``UNDO_WAIT``). What it raises is logged on ``logger`` as ``event`` (``what``
    says what was being undone), not raised: the caller's CancelledError goes on either
    way."""
    task = asyncio.ensure_future(undo)
    _UNDOING.add(task)
    task.add_done_callback(lambda done: _undone(what, done, event, logger))
    # Cancelled again, timed out or failed: it goes on, and is logged when done.
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(asyncio.shield(task), UNDO_WAIT if wait is None else wait)


def _undone(what: str, task: asyncio.Future[Any], event: str, logger: logging.Logger) -> None:
    _UNDOING.discard(task)
    error = None if task.cancelled() else task.exception()
    if task.cancelled() or error is not None:
        logger.warning(
            "could not undo %s after a cancelled call: %r (it is given back by time)",
            what,
            error,
            extra={"event": event},
        )


def release_by_id(limiter: Any, key: str, lease_id: str) -> Flow[bool]:
    """Give back lease ``lease_id`` on ``key`` (a ``DecisionCore``'s flow), whatever its
    acquire answered, or if it never answered: a release of a lease not held does nothing."""
    return bool((yield from limiter.slot_flow("release_slot", key, lease_id)))


def given_back_if_interrupted(acquire: Callable[..., Any], *, awaited: bool) -> Any:
    """A limiter's ``acquire_slot`` that gives the slot back when the call is cancelled
    (``awaited``) or interrupted (blocking: a KeyboardInterrupt, a signal's exception) after
    its request may have reached the store. The lease id is made here, before the request,
    so that the release can name it; a caller's own ``lease_id`` (a renewal of a lease it
    holds) is never released. A store error is not undone: the slot comes back by its TTL."""

    if awaited:

        async def given_back(self: Any, *args: Any, **kwargs: Any) -> Any:
            made = _made_id(kwargs)
            try:
                return await acquire(self, *args, **kwargs)
            except asyncio.CancelledError:
                key = args[0] if args else kwargs.get("key")
                if made is not None and isinstance(key, str):
                    undo = self.run(release_by_id(self, key, made))
                    await undo_cancelled(f"slot {made!r} of {key!r}", undo)
                raise

        functools.update_wrapper(given_back, acquire)
        return given_back

    def given_back_now(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = _made_id(kwargs)
        try:
            return acquire(self, *args, **kwargs)
        except BaseException as exc:
            key = args[0] if args else kwargs.get("key")
            if not isinstance(exc, Exception) and made is not None and isinstance(key, str):
                try:
                    self.run(release_by_id(self, key, made))
                except Exception as error:  # the interrupt goes on; the TTL frees the slot
                    log.warning(
                        "could not give back slot %r of %r after an interrupt: %r",
                        made,
                        key,
                        error,
                        extra={"event": "undo_failed"},
                    )
            raise

    functools.update_wrapper(given_back_now, acquire)
    return given_back_now


def _made_id(kwargs: dict[str, Any]) -> str | None:
    """The lease id made for this call (set in ``kwargs``), or None when the caller gave one."""
    if kwargs.get("lease_id") is not None:
        return None
    made = kwargs["lease_id"] = uuid.uuid4().hex
    return made
