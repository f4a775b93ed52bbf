"""Noticing a Sentinel failover while the old primary still answers.

redis-py asks the Sentinels for the primary only when it opens a connection, and
the store's connections live long. After a planned failover (``SENTINEL FAILOVER``,
an upgrade) the old primary stays up and keeps answering as a primary until the
Sentinels demote it, about 10 s later (they read its ``INFO`` every 10 s); every
decision it made after its replica's promotion is then thrown away when it
resyncs from the new primary. Nothing fails, so no failure mode runs.

So while a store is used, the Sentinels are read again every ``CHECK_EVERY_S``,
off the calls' path (a short thread, or a task of the running loop): each is
asked ``SENTINEL MASTER``, and the address with the highest configuration epoch
(the newest failover's) wins. When it changes, the router drops its connections
(in-flight requests finish first) and new ones ask the Sentinels, that one first.
An idle store reads nothing: its next call starts a reading, and the calls after
that reading go to the new primary.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFoundError
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import MasterNotFoundError, Sentinel

from ratewarden.storage._redis_errors import REDIS_ERRORS

__all__ = [
    "CHECK_EVERY_S",
    "AsyncTellingSentinel",
    "TellingSentinel",
    "Watch",
    "start_thread",
    "watch_for",
]

#: Seconds between two readings of the Sentinels while a store is used.
CHECK_EVERY_S = 0.5

#: Seconds a reading may take before another may start (one lost in a fork, a closed loop).
_STUCK_S = 60.0

Address = tuple[str, int]


class Watch:
    """When to read a Sentinel service's primary again, and what the Sentinels said last.

    ``due()`` is cheap and says whether the caller should start a reading now (one at
    a time); the reading hands what each Sentinel answered to ``read``, which calls
    ``on_switch`` when the primary's address changed (the first reading too: a
    connection made before it may have been told of a primary already replaced).
    """

    __slots__ = ("_address", "_busy_until", "_due", "_lock", "_on_switch", "_pid", "service")

    def __init__(self, service: str, on_switch: Callable[[], None]) -> None:
        self.service = service
        self._on_switch = on_switch
        self._address: Address | None = None
        self._due = 0.0
        self._busy_until = 0.0
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def due(self) -> bool:
        """Whether a reading should start now; if so, the caller must start one."""
        now = time.monotonic()
        if now < self._due:
            return False
        if self._pid != os.getpid():  # a forked child: the parent's reading is not ours
            self._pid, self._lock, self._busy_until = os.getpid(), threading.Lock(), 0.0
        with self._lock:
            if now < self._due or now < self._busy_until:
                return False
            self._busy_until = now + _STUCK_S
            return True

    def read(self, sentinels: list[Any], answers: dict[int, Any]) -> None:
        """End a reading: ``answers`` maps ``id(sentinel)`` to its ``SENTINEL MASTER`` (parsed
        by redis-py) or the error it raised. Puts the Sentinel with the newest
        configuration first in ``sentinels``, so that a new connection asks it first."""
        best: tuple[int, Any, Address] | None = None
        for sentinel in list(sentinels):
            state = answers.get(id(sentinel))
            if not isinstance(state, dict):
                continue
            try:
                found = (
                    int(state["config-epoch"]),
                    sentinel,
                    (str(state["ip"]), int(state["port"])),
                )
            except (KeyError, TypeError, ValueError):
                continue
            if best is None or found[0] > best[0]:
                best = found
        if best is not None:
            _, sentinel, address = best
            # By identity: the list may have been reordered since it was read.
            index = next((i for i, known in enumerate(sentinels) if known is sentinel), 0)
            sentinels[0], sentinels[index] = sentinels[index], sentinels[0]
            changed, self._address = address != self._address, address
            if changed:
                self._on_switch()
        self._due = time.monotonic() + CHECK_EVERY_S
        self._busy_until = 0.0

    def failed(self) -> None:
        """End a reading that raised: the next is due after the usual wait."""
        self._due = time.monotonic() + CHECK_EVERY_S
        self._busy_until = 0.0

    def read_now(self, sentinels: list[Any]) -> None:
        """One reading, blocking: each Sentinel asked in turn (each bounded by its timeout)."""
        answers: dict[int, Any] = {}
        for sentinel in list(sentinels):
            try:
                answers[id(sentinel)] = sentinel.sentinel_master(self.service)
            except REDIS_ERRORS as exc:
                answers[id(sentinel)] = exc
        self.read(sentinels, answers)

    async def aread_now(self, sentinels: list[Any]) -> None:
        """One reading on the running loop, every Sentinel asked at once; it never raises
        (but when cancelled): a reading that failed is tried again when the next is due."""
        snapshot = list(sentinels)
        try:
            replies = await asyncio.gather(
                *(sentinel.sentinel_master(self.service) for sentinel in snapshot),
                return_exceptions=True,
            )
            self.read(sentinels, {id(s): reply for s, reply in zip(snapshot, replies, strict=True)})
        except Exception:
            self.failed()
        except BaseException:
            self.failed()
            raise


def watch_for(client: Any, on_switch: Callable[[], None]) -> tuple[Watch, list[Any]] | None:
    """A ``Watch`` of the Sentinel service ``client``'s pool serves (and the pool's list of
    Sentinel clients, which redis-py reorders as it asks them); None for any other pool."""
    pool = getattr(client, "connection_pool", None)
    manager = getattr(pool, "sentinel_manager", None)
    service = getattr(pool, "service_name", None)
    if manager is None or not isinstance(service, str) or not getattr(pool, "is_master", False):
        return None
    sentinels = getattr(manager, "sentinels", None)
    if not isinstance(sentinels, list):
        return None
    return Watch(service, on_switch), sentinels


def start_thread(watch: Watch, sentinels: list[Any]) -> None:
    """Run one blocking reading on a short daemon thread."""
    threading.Thread(
        target=_read_safely, args=(watch, sentinels), name="ratewarden-sentinel", daemon=True
    ).start()


def _read_safely(watch: Watch, sentinels: list[Any]) -> None:
    try:
        watch.read_now(sentinels)
    except BaseException:  # a reading that failed is tried again when the next is due
        watch.failed()


#: Set while a primary is looked for: each Sentinel's state of the service, as it is judged.
_JUDGED: ContextVar[list[dict[str, Any]] | None] = ContextVar("rw_sentinel_judged", default=None)


class _Telling:
    """Says why no primary was found: no Sentinel that answered knows the service (a wrong
    service name or host list), or they know it but name no primary that is up (an outage,
    or a failover under way: waiting helps). redis-py says "No master found" for both."""

    def check_master_state(self, state: dict[str, Any], service_name: str) -> bool:
        judged = _JUDGED.get()
        if judged is not None:
            judged.append(state)
        found: bool = super().check_master_state(state, service_name)  # type: ignore[misc]
        return found


def _why(exc: Exception, service: str, judged: list[dict[str, Any]]) -> str:
    if judged:
        return (
            f"{exc} (the sentinels know {service!r} but name no primary that is up: it is "
            "down, or a failover is under way)"
        )
    said = str(exc)
    if "ConnectionError(" not in said and "TimeoutError(" not in said:  # each host answered
        return f"{said} (no host knows that service: is each host a sentinel watching it?)"
    return said


class TellingSentinel(_Telling, Sentinel):
    """redis-py's ``Sentinel``, its "No master found" saying why (``_Telling``)."""

    def discover_master(self, service_name: str) -> Any:
        judged: list[dict[str, Any]] = []
        token = _JUDGED.set(judged)
        try:
            return super().discover_master(service_name)
        except MasterNotFoundError as exc:
            raise MasterNotFoundError(_why(exc, service_name, judged)) from None
        finally:
            _JUDGED.reset(token)


class AsyncTellingSentinel(_Telling, AsyncSentinel):
    """``TellingSentinel`` for asyncio."""

    async def discover_master(self, service_name: str) -> Any:
        judged: list[dict[str, Any]] = []
        token = _JUDGED.set(judged)
        try:
            return await super().discover_master(service_name)
        except AsyncMasterNotFoundError as exc:
            raise AsyncMasterNotFoundError(_why(exc, service_name, judged)) from None
        finally:
            _JUDGED.reset(token)
