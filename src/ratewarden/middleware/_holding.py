"""A concurrency slot held for a whole response: given back when it is over, renewed as it streams.

The concurrency and the load shedding middlewares take a slot before the app
runs; from there on they do the same thing, written here once:

- on ASGI (``hold_asgi``), the slot is given back right after the last body
  message (``more_body`` false) has been sent, or when the app returns or
  raises, whichever comes first: a streaming response holds it until its last
  chunk, a background task that runs after the body does not;
- on WSGI (``hold_wsgi``), once the server has taken the response iterable's
  last chunk (or the app's iterable raised), else when the server closes it
  (``HeldResponse`` closes the app's iterable first), or at once when the app
  raises before returning one: werkzeug skips ``close()`` when the client resets
  the connection just after the response, so ``close()`` alone would leave the
  slot to its TTL;
- inside Django's middleware stack (``hold_django``, ``ahold_django``), when the
  view has returned its response, unless it streams in the mode Django runs
  the middleware in: then when its last chunk has been taken, or when Django
  closes it first (sync mode) or stops taking chunks (async mode);
- while the body streams, the slot is renewed on the back of a chunk, at most
  once per third of its TTL: no background task, no extra store call for short
  responses.

An awaited release or renewal is not cut short when the task it runs in is cancelled
(the client went away, or Starlette's ``StreamingResponse`` stopped listening once
the response was complete): it runs to its end, then the cancellation goes on
(``_shielded``). A failed release or renewal is logged, not raised: the slot's TTL frees it. Each
release and renewal, done or failed, goes to the ``Held``'s ``count`` (the concurrency
middleware's ``Metrics.slot``: ``released``, ``release_failed``, ``renewed``,
``renew_failed``, ``lapsed``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from ratewarden.clock import Clock
from ratewarden.errors import StorageError
from ratewarden.limiter import Lease
from ratewarden.middleware._outcome import close_wsgi
from ratewarden.middleware._shielded import to_the_end
from ratewarden.middleware._types import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    StartResponse,
    WSGIApp,
)

__all__ = [
    "AsyncSlots",
    "Held",
    "HeldResponse",
    "Slots",
    "ahold_django",
    "arelease",
    "arenew",
    "held_chunks",
    "hold_asgi",
    "hold_django",
    "hold_wsgi",
    "release",
    "renew",
]

log = logging.getLogger("ratewarden.middleware")


class Slots(Protocol):
    """What gives a held slot back and renews it, blocking: a ``Limiter``."""

    def release_slot(self, lease: Lease) -> bool:
        """Give the lease back."""
        ...

    def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """Extend the lease by its ttl from now."""
        ...


class AsyncSlots(Protocol):
    """What gives a held slot back and renews it, awaited: an ``AsyncLimiter``."""

    async def release_slot(self, lease: Lease) -> bool:
        """Give the lease back."""
        ...

    async def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """Extend the lease by its ttl from now."""
        ...


def _uncounted(outcome: str) -> None:
    """Where a ``Held`` with nothing to count its releases and renewals sends them."""


class Held:
    """One granted lease of ``ttl`` seconds: when to renew it, and whether it was given back.
    ``count(outcome)`` hears what became of each release and renewal (see the module)."""

    __slots__ = ("_gate", "clock", "count", "lease", "released", "renewed_at", "ttl")

    def __init__(
        self, lease: Lease, ttl: float, clock: Clock, count: Callable[[str], None] = _uncounted
    ) -> None:
        self.lease = lease
        self.ttl = ttl
        self.clock = clock
        self.count = count
        self.released = False
        self.renewed_at = clock.now()
        # Taken once, never given back: a WSGI response's end and its close() may race.
        self._gate = threading.Lock()

    def renewal_due(self) -> bool:
        """True at most once per third of the TTL while the slot is held: the caller renews."""
        if self.released:
            return False
        now = self.clock.now()
        if now - self.renewed_at < self.ttl / 3:
            return False
        self.renewed_at = now
        return True

    def take_release(self) -> bool:
        """True the first time only, whichever thread asks: the caller releases."""
        if not self._gate.acquire(blocking=False):
            return False
        self.released = True
        return True


@contextmanager
def _tolerated(what: str, held: Held, failed: str) -> Iterator[None]:
    """A failed release or renewal is logged and counted as ``failed``, not raised: the
    slot's TTL frees it."""
    try:
        yield
    except StorageError as exc:
        held.count(failed)
        log.warning(
            "concurrency slot %s of %s failed (its TTL frees it): %s", what, held.lease.key, exc
        )


def _renewed(held: Held, renewed: bool) -> None:
    if renewed:
        held.count("renewed")
    else:
        held.count("lapsed")
        log.warning("concurrency slot of %s lapsed while streaming", held.lease.key)


def release(held: Held, slots: Slots) -> None:
    """Give the slot back, once (a failure is logged: its TTL frees it)."""
    if held.take_release():
        with _tolerated("release", held, "release_failed"):
            slots.release_slot(held.lease)
            held.count("released")


async def arelease(held: Held, slots: AsyncSlots) -> None:
    """``release``, awaited to its end even when the caller is cancelled (see the module)."""
    if held.take_release():
        await to_the_end(_arelease(held, slots))


async def _arelease(held: Held, slots: AsyncSlots) -> None:
    with _tolerated("release", held, "release_failed"):
        await slots.release_slot(held.lease)
        held.count("released")


def renew(held: Held, slots: Slots) -> None:
    """Renew the slot when a renewal is due (a lapsed or failed one is logged)."""
    if held.renewal_due():
        with _tolerated("renewal", held, "renew_failed"):
            _renewed(held, slots.renew_slot(held.lease))


async def arenew(held: Held, slots: AsyncSlots) -> None:
    """``renew``, awaited to its end even when the caller is cancelled (see the module)."""
    if held.renewal_due():
        await to_the_end(_arenew(held, slots))


async def _arenew(held: Held, slots: AsyncSlots) -> None:
    with _tolerated("renewal", held, "renew_failed"):
        _renewed(held, await slots.renew_slot(held.lease))


async def hold_asgi(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, held: Held, slots: AsyncSlots
) -> None:
    """Run ``app`` holding ``held``; give it back after the last body message, or when the
    app returns or raises."""

    async def send_holding(message: Message) -> None:
        await send(message)
        if message["type"] != "http.response.body":
            return
        if not message.get("more_body", False):
            await arelease(held, slots)
        else:
            await arenew(held, slots)

    try:
        await app(scope, receive, send_holding)
    finally:
        await arelease(held, slots)


def hold_wsgi(
    app: WSGIApp,
    environ: dict[str, Any],
    start_response: StartResponse,
    held: Held,
    slots: Slots,
) -> Iterable[bytes]:
    """Run ``app`` holding ``held``: its response, wrapped to give the slot back at its end."""
    try:
        result = app(environ, start_response)
    except BaseException:
        release(held, slots)
        raise
    return HeldResponse(result, held, slots)


class HeldResponse:
    """The app's response iterable; the slot goes back once the server has taken its last
    chunk (or the app's iterable raised), else when the server closes it (it left early)."""

    __slots__ = ("_held", "_result", "_slots")

    def __init__(self, result: Iterable[bytes], held: Held, slots: Slots) -> None:
        self._result = result
        self._held = held
        self._slots = slots

    def __iter__(self) -> Iterator[bytes]:
        # Not on GeneratorExit: a generator dropped unfinished is the server's early exit,
        # whose close() releases after closing the app's iterable.
        try:
            for chunk in self._result:
                renew(self._held, self._slots)
                yield chunk
        except Exception:
            release(self._held, self._slots)
            raise
        release(self._held, self._slots)

    def close(self) -> None:
        """Close the app's iterable (as WSGI asks), then give the slot back."""
        try:
            close_wsgi(self._result)
        finally:
            release(self._held, self._slots)


async def held_chunks(
    chunks: AsyncIterator[bytes], held: Held, slots: AsyncSlots
) -> AsyncIterator[bytes]:
    """An async stream's chunks, the slot renewed as they go and given back at the end (or
    when whoever takes them closes the iterator early: the client left)."""
    try:
        async for chunk in chunks:
            await arenew(held, slots)
            yield chunk
    finally:
        await arelease(held, slots)


#: A Django middleware's next step: the view, through the middleware listed after it.
GetResponse = Callable[[Any], Any]


def hold_django(get_response: GetResponse, request: Any, held: Held, slots: Slots) -> Any:
    """Django's sync mode: run the view holding ``held``; a streaming response gives it back
    when Django closes it (its iterator wrapped as the WSGI middleware wraps a response),
    any other response at once (its body is built: the work is done)."""
    try:
        response = get_response(request)
    except BaseException:
        release(held, slots)
        raise
    if getattr(response, "streaming", False) and not response.is_async:
        # Django calls the new content's close() when it closes the response.
        response.streaming_content = HeldResponse(response.streaming_content, held, slots)
    else:
        release(held, slots)
    return response


async def ahold_django(
    get_response: GetResponse, request: Any, held: Held, slots: AsyncSlots
) -> Any:
    """Django's async mode: run the view holding ``held``; a streaming response gives it back
    once its last chunk is taken, or when Django stops taking them."""
    try:
        response = await get_response(request)
    except BaseException:
        await arelease(held, slots)
        raise
    if getattr(response, "streaming", False) and response.is_async:
        response.streaming_content = held_chunks(response.streaming_content, held, slots)
    else:
        await arelease(held, slots)
    return response
