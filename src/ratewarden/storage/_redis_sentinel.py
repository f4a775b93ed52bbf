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

When no Sentinel names a primary, the error says why (``_Search``): an outage, or a
setting that waiting will not fix (a refused sentinel password, a sentinel certificate
that does not verify, hosts that are not sentinels), which is raised as ``ServerUnusable``
and reaches the caller as a ``StorageError``, as a data server's refused password does.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from redis import exceptions as rx
from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFoundError
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import MasterNotFoundError, Sentinel

from ratewarden.storage._redis_errors import (
    REDIS_ERRORS,
    certificate_refused,
    credentials_refused,
    gave_password,
    refusal,
    tls_refusal,
)
from ratewarden.storage._redis_server import ServerUnusable

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


#: What a sentinel asked for the primaries may raise that does not end the search (redis-py's).
_ASKING_ERRORS = (rx.ConnectionError, rx.ResponseError, rx.TimeoutError)


class _Search:
    """One search for a service's primary: what each sentinel said and, when none names a
    primary, why, judged from the error objects met.

    redis-py's ``discover_master`` keeps only its errors' text, in words that change
    between its versions (8.x writes ``network:ConnectionError``), and says "No master
    found" for every case; the loop is written here (the same order and choice) to keep
    the objects. The cases: the sentinels know the service but name no primary that is up
    (an outage, or a failover under way: waiting helps); a sentinel refused the store's
    sentinel credentials, or its TLS certificate does not verify, or every host answered
    as no sentinel does (``ServerUnusable``: a setting, which waiting will not fix, so an
    open failure mode never turns it into allowing everything); every host answered and
    none knows the service (a wrong name or host list, probably); or some could not be
    reached (an outage).
    """

    __slots__ = ("asked", "failures", "known", "service")

    def __init__(self, service: str) -> None:
        self.service = service
        self.asked = 0
        self.known = False
        self.failures: list[tuple[Any, BaseException]] = []

    def primary(self, manager: Any, masters: Any) -> Address | None:
        """The primary's address in ``masters`` (a sentinel's answer), if it is up."""
        self.asked += 1
        state = masters.get(self.service)
        if not state:
            return None
        self.known = True
        if not manager.check_master_state(state, self.service):
            return None
        forced = getattr(manager, "_force_master_ip", None)  # redis-py's force_master_ip
        return (state["ip"] if forced is None else forced), state["port"]

    def failed(self, sentinel: Any, exc: BaseException) -> None:
        self.asked += 1
        self.failures.append((sentinel, exc))

    def error(self, not_found: type[Exception]) -> Exception:
        """The error to raise: ``not_found`` (redis-py's, an outage) or ``ServerUnusable``."""
        said = f"No master found for {self.service!r}"
        if self.failures:
            said += ": " + ", ".join(_failure(sentinel, exc) for sentinel, exc in self.failures)
        if self.known:
            return not_found(
                f"{said} (the sentinels know {self.service!r} but name no primary that is "
                "up: it is down, or a failover is under way)"
            )
        for sentinel, exc in self.failures:
            certificate = certificate_refused(exc)
            if certificate is not None:
                return ServerUnusable(f"{said}; {tls_refusal(certificate, 'a sentinel')}")
            if credentials_refused(exc):
                return ServerUnusable(f"{said}; {_credentials(sentinel)}")
        strangers = sum(refusal(exc, "") is not None for _, exc in self.failures)
        if strangers and strangers == self.asked:
            return ServerUnusable(
                f"{said}; no host answered as a Sentinel: a redis+sentinel:// URL lists the "
                "Sentinels (port 26379), not the data servers (one server is a redis:// URL): "
                "waiting will not help"
            )
        if strangers == len(self.failures):  # every host answered: none was out of reach
            return not_found(
                f"{said} (no host knows that service: is each host a sentinel watching it?)"
            )
        return not_found(said)


def _failure(sentinel: Any, exc: BaseException) -> str:
    """``sentinel HOST:PORT - ErrorClass: its words``, in any redis-py version."""
    kwargs = getattr(getattr(sentinel, "connection_pool", None), "connection_kwargs", {})
    where = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return f"sentinel {where} - {type(exc).__name__}: {str(exc).rstrip('. ')}"


def _credentials(sentinel: Any) -> str:
    """What to do when a sentinel refused the store's sentinel credentials."""
    kwargs = getattr(getattr(sentinel, "connection_pool", None), "connection_kwargs", {})
    if not gave_password(kwargs):
        return (
            "a sentinel needs a password, and the store is given none: give it in the store "
            "URL's query (?sentinel_password=...; sentinel_username= for an ACL user; "
            "REDIS_SENTINEL_AUTH under ratewarden serve), or check that each host is a "
            "Sentinel: waiting will not help"
        )
    return (
        "a sentinel refused the store's sentinel credentials: check sentinel_password (and "
        "sentinel_username) in the store URL's query (REDIS_SENTINEL_AUTH under ratewarden "
        "serve); the URL's user and password are the data servers': waiting will not help"
    )


class TellingSentinel(Sentinel):
    """redis-py's ``Sentinel``, its "No master found" saying why (``_Search``)."""

    def discover_master(self, service_name: str) -> Any:
        search = _Search(service_name)
        for number, sentinel in enumerate(self.sentinels):
            try:
                masters = sentinel.sentinel_masters()
            except _ASKING_ERRORS as exc:
                search.failed(sentinel, exc)
                continue
            address = search.primary(self, masters)
            if address is not None:  # asked first next time
                self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
                return address
        raise search.error(MasterNotFoundError)


class AsyncTellingSentinel(AsyncSentinel):
    """``TellingSentinel`` for asyncio."""

    async def discover_master(self, service_name: str) -> Any:
        search = _Search(service_name)
        for number, sentinel in enumerate(self.sentinels):
            try:
                masters = await sentinel.sentinel_masters()
            except _ASKING_ERRORS as exc:
                search.failed(sentinel, exc)
                continue
            address = search.primary(self, masters)
            if address is not None:  # asked first next time
                self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
                return address
        raise search.error(AsyncMasterNotFoundError)
