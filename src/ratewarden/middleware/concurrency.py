"""Concurrency slots from the middleware: at most ``limit`` requests of one identity in flight.

::

    app.add_middleware(ConcurrencyMiddleware, limiter=AsyncLimiter(store), limit=4,
                       key=by_api_key(), ttl=30)
    app.wsgi_app = WSGIConcurrencyMiddleware(app.wsgi_app, limiter=Limiter(store), limit=4)

A request takes one slot of its identity (``Limiter.acquire_slot``) before the
app runs and gives it back when its response is over: on ASGI, when the last
body message has been sent (``more_body`` false: a streaming response holds its
slot until its last chunk), or when the app returns or fails, whichever comes
first; on WSGI, once the server has taken the response iterable's last chunk,
or when it closes the iterable first. A request that
finds no slot free gets ``status`` (429 by default, 503 for a server that
would rather say it is busy) with a ``Retry-After`` and a problem document, and
never reaches the app. When the store cannot be asked (down, too slow, the
limiter's breaker open), the failure mode answers (``failure_mode``, as the rate
limit middleware's): ``open`` (the default) runs the app without a slot,
``closed`` answers 503; never a 500. ``metrics`` counts those requests
(``degraded``) and the slots (``slot``: acquired, refused, then released, renewed, or
the store failing at it).

Every slot carries a TTL, so a worker that dies mid-request loses its slots one
TTL later. A response that streams for longer than the TTL renews its slot as it
sends (at most once per third of the TTL, piggybacked on a body chunk); a
response that sends nothing for a whole TTL can lose its slot (documented in
docs/middleware.md). Holding, renewing and giving back the slot is ``_holding``'s,
shared with the load shedding middleware.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ratewarden.checks import (
    MAX_LEASE_SECONDS,
    check_slot_count,
    is_number,
    keywords_checked,
    named_for,
)
from ratewarden.clock import Clock
from ratewarden.deprecation import UNSET, renamed
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Lease, check_metrics
from ratewarden.metrics import Metrics, optional_hook
from ratewarden.middleware._clock import checked_clock
from ratewarden.middleware._failure import OPEN, FailureAnswer, chosen_failure_mode
from ratewarden.middleware._holding import Held, hold_asgi, hold_wsgi
from ratewarden.middleware._identity import ANONYMOUS, KeyFunc
from ratewarden.middleware._outcome import Outcome, refusal, send_asgi, send_wsgi
from ratewarden.middleware._request import RequestInfo, from_asgi, from_wsgi
from ratewarden.middleware._rules import Selection, check_name
from ratewarden.middleware._types import ASGIApp, Receive, Scope, Send, StartResponse, WSGIApp

__all__ = [
    "AsyncSlotLimiter",
    "POLICY_KEYS",
    "ConcurrencyMiddleware",
    "SlotLimiter",
    "SlotPolicy",
    "WSGIConcurrencyMiddleware",
]


class SlotLimiter(Protocol):
    """Anything with synchronous concurrency slots: ``Limiter``."""

    def acquire_slot(self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0) -> Lease:
        """Take a slot of ``limit`` on ``key`` for at most ``ttl`` seconds."""
        ...

    def release_slot(self, lease: Lease) -> bool:
        """Give the lease back."""
        ...

    def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """Extend the lease by its ttl from now."""
        ...


class AsyncSlotLimiter(Protocol):
    """Anything with asyncio concurrency slots: ``AsyncLimiter``."""

    async def acquire_slot(
        self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0
    ) -> Lease:
        """Take a slot of ``limit`` on ``key`` for at most ``ttl`` seconds."""
        ...

    async def release_slot(self, lease: Lease) -> bool:
        """Give the lease back."""
        ...

    async def renew_slot(self, lease: Lease, ttl: float | None = None) -> bool:
        """Extend the lease by its ttl from now."""
        ...


def _whole(what: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"concurrency middleware {what}={value!r}: a whole number >= {minimum}"
        )
    return value


class SlotPolicy:
    """The shared, I/O-free part: which requests, whose slots, how many, the refusal, and
    the failure mode (``failure_mode``, ``metrics``: see the rate limit middleware's;
    ``failure`` is the deprecated name of ``failure_mode``)."""

    @keywords_checked
    def __init__(
        self,
        *,
        limit: int,
        name: str = "inflight",
        key: KeyFunc | None = None,
        ttl: float = 30.0,
        status: int = 429,
        retry_after: int = 1,
        paths: Iterable[str] | str | None = None,
        methods: Iterable[str] | str | None = None,
        fallback: str = ANONYMOUS,
        clock: Clock | None = None,
        failure_mode: str = OPEN,
        metrics: Metrics | None = None,
        failure: str = UNSET,
    ) -> None:
        failure_mode = chosen_failure_mode("SlotPolicy", failure_mode, failure, stacklevel=5)
        self.name = check_name(name)
        self.limit = check_slot_count("middleware limit", _whole("limit", limit, 1))
        if not is_number(ttl) or not 0.001 <= ttl <= MAX_LEASE_SECONDS:
            raise ConfigurationError(
                f"concurrency middleware ttl={ttl!r}: seconds, at least 0.001 (1 ms: a shorter "
                f"slot lapses before it is heard of) and at most 365 days "
                f"({MAX_LEASE_SECONDS:,}, as acquire_slot's): a dead worker's slots come back "
                "after it"
            )
        self.ttl = float(ttl)
        if status not in (429, 503):
            raise ConfigurationError(f"concurrency middleware status={status!r}: 429 or 503")
        self.status = status
        self.retry_after = _whole("retry_after", retry_after, 0)
        self.selection = Selection(
            "concurrency middleware", key=key, fallback=fallback, paths=paths, methods=methods
        )
        self.key = self.selection.key
        self.fallback = fallback
        self.clock = checked_clock("concurrency middleware", clock)
        checked = check_metrics("concurrency middleware", metrics, ("degraded",))
        self.failure_answer = FailureAnswer(failure_mode, checked, self.name, self.clock)
        self._slot = optional_hook(checked, "slot")
        plural = "" if self.limit == 1 else "s"
        detail = f"More than {self.limit} request{plural} in flight for {self.name!r}"
        detail += f"; retry in {self.retry_after} s." if self.retry_after else "."
        self.refusal = refusal(
            status,
            detail,
            retry_after=self.retry_after or None,
            extra={"policy": self.name, "limit": self.limit},
        )
        self.body = self.refusal.body

    def matches(self, request: RequestInfo) -> bool:
        """True when the request takes a slot (its method and path are selected)."""
        return self.selection.matches(request)

    def slot_key(self, request: RequestInfo) -> str:
        """``<name>:<identity>``, the identity falling back to ``fallback``, never unlimited."""
        return f"{self.name}:{self.selection.identity(request)}"

    def refusal_headers(self) -> list[tuple[str, str]]:
        """The refusal's headers: Retry-After (unless 0), no caching, the problem's type."""
        return list(self.refusal.headers)

    def status_line(self) -> str:
        """``"429 Too Many Requests"`` or ``"503 Service Unavailable"``."""
        return "429 Too Many Requests" if self.status == 429 else "503 Service Unavailable"

    def admit(self, found: Lease | StorageError, limiter: object) -> Held | Outcome:
        """What ``acquire_slot`` gave (a Lease, or the StorageError it raised) means: the
        slot, held (run the app, then release it), else the Outcome to send (a refusal, or
        the failure mode's: open runs the app without a slot)."""
        if isinstance(found, StorageError):
            return self.failure_answer.caught(found, limiter)
        if not found.allowed:
            self.count("refused")
            return self.refusal
        self.count("acquired")
        return Held(found, self.ttl, self.clock, self.count)

    def count(self, outcome: str) -> None:
        """A slot's ``outcome``, counted by ``metrics.slot`` under ``name``."""
        self._slot(rule=self.name, outcome=outcome)


def _policy(options: dict[str, Any], who: str) -> SlotPolicy:
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"concurrency middleware: unknown option(s) {unknown}; known: {sorted(_OPTIONS)}"
        )
    if "limit" not in options:
        raise ConfigurationError(
            f"{who}: limit= is required: the most requests of one identity in flight at once"
        )
    if "failure" in options:  # the deprecated name; stacklevel 5: the middleware's caller,
        # past this frame, __init__ and _public's
        options["failure_mode"] = renamed(
            who,
            "failure",
            "failure_mode",
            options.pop("failure"),
            options.get("failure_mode", OPEN),
            OPEN,
            stacklevel=5,
        )
    return SlotPolicy(**options)


#: ``SlotPolicy``'s keywords, as the middlewares take them (``failure``: deprecated).
POLICY_KEYS = (
    "limit",
    "name",
    "key",
    "ttl",
    "status",
    "retry_after",
    "paths",
    "methods",
    "fallback",
    "clock",
    "failure_mode",
    "failure",
    "metrics",
)
_OPTIONS = frozenset(POLICY_KEYS)


#: The app a middleware wraps (ASGI or WSGI) and the limiter whose slots it takes.
A = TypeVar("A")
L = TypeVar("L", bound="SlotLimiter | AsyncSlotLimiter")


def _public(init: Callable[..., None]) -> Callable[..., None]:
    """``init``, the shared ``__init__``, refusing a second positional argument and wording a
    missing one with the class being built (``ConcurrencyMiddleware() missing ...``), not
    ``_SlotMiddleware``; the options are ``_policy``'s to check."""

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        who = type(self).__name__
        if len(args) > 1:
            raise ConfigurationError(
                f"{who}: {len(args)} positional arguments given, but it takes at most 1 (app); "
                "give the rest by keyword (limiter=..., limit=...)"
            )
        try:
            init(self, *args, **kwargs)
        except TypeError as exc:
            renamed = named_for(exc, init, f"{who}()")
            if renamed is None:
                raise
            raise renamed from None

    return checked


class _SlotMiddleware(Generic[A, L]):
    """The constructor both middlewares share: the app, the limiter, the ``SlotPolicy``."""

    _ASYNC: ClassVar[bool]
    _hint: ClassVar[str]

    @_public
    def __init__(self, app: A, *, limiter: L, **policy: Any) -> None:
        acquire = getattr(limiter, "acquire_slot", None)
        if not callable(acquire):
            raise ConfigurationError(f"limiter {limiter!r} has no acquire_slot(key, limit) method")
        if inspect.iscoroutinefunction(acquire) != self._ASYNC:
            raise ConfigurationError(f"{type(self).__name__} limiter={limiter!r}: {self._hint}")
        self.app = app
        self.limiter = limiter
        self.policy = _policy(policy, type(self).__name__)


class ConcurrencyMiddleware(_SlotMiddleware[ASGIApp, AsyncSlotLimiter]):
    """ASGI: hold one of ``limit`` slots per identity while a request's response is sent.

    Keyword arguments are ``SlotPolicy``'s. ``limiter`` is an ``AsyncLimiter``
    (or anything with its ``acquire_slot`` / ``release_slot`` / ``renew_slot``).
    """

    _ASYNC = True
    _hint = "an AsyncLimiter (a Limiter blocks: it goes with WSGIConcurrencyMiddleware, on WSGI)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = from_asgi(scope)
        policy = self.policy
        if not policy.matches(request):
            await self.app(scope, receive, send)
            return
        found: Lease | StorageError
        try:
            key = policy.slot_key(request)
            found = await self.limiter.acquire_slot(key, policy.limit, ttl=policy.ttl)
        except StorageError as exc:
            found = exc
        held = policy.admit(found, self.limiter)
        if isinstance(held, Outcome):
            if held.blocked:
                await send_asgi(send, held, head=request.method == "HEAD")
            else:
                await self.app(scope, receive, send)
            return
        await hold_asgi(self.app, scope, receive, send, held, self.limiter)


class WSGIConcurrencyMiddleware(_SlotMiddleware[WSGIApp, SlotLimiter]):
    """WSGI: hold one of ``limit`` slots per identity until the server has sent the response.

    Keyword arguments are ``SlotPolicy``'s. ``limiter`` is a ``Limiter``.
    """

    _ASYNC = False
    _hint = "a Limiter (an AsyncLimiter goes with ConcurrencyMiddleware, on ASGI)"

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = from_wsgi(environ)
        policy = self.policy
        if not policy.matches(request):
            return self.app(environ, start_response)
        found: Lease | StorageError
        try:
            found = self.limiter.acquire_slot(
                policy.slot_key(request), policy.limit, ttl=policy.ttl
            )
        except StorageError as exc:
            found = exc
        held = policy.admit(found, self.limiter)
        if isinstance(held, Outcome):
            if held.blocked:
                return send_wsgi(start_response, held, head=request.method == "HEAD")
            return self.app(environ, start_response)
        return hold_wsgi(self.app, environ, start_response, held, self.limiter)
