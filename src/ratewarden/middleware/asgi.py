"""``RateLimitMiddleware``: pure ASGI rate limiting for Starlette, FastAPI or any ASGI app.

::

    rules = RuleSet([Rule("per-ip", "1000/minute"), Rule("contract", "100/minute",
                     key=by_api_key(), cost={"GET": 1, "POST": 5})])
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(store), rules=rules)

Non-HTTP scopes (``websocket``, ``lifespan``) pass through untouched. An
allowed request goes on to the app, and the RateLimit headers are added to its
response start; a denied one is answered here with 429. When the limiter's
store fails, the failure policy answers (``_failure``): by default the request
goes on unchecked; never a 500. Nothing imports
Starlette: the route lookup for ``@exempt`` / ``@limit`` / ``@override``
(``starlette_endpoint``, the default resolver) runs only when the scope's
``app`` has routes.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.metrics import Metrics
from ratewarden.middleware._core import AsgiAnswer, AsyncHitter, Outcome, RuleSet, drive_async
from ratewarden.middleware._failure import FailurePolicy, Unavailable
from ratewarden.middleware._request import from_asgi
from ratewarden.middleware._routes import starlette_endpoint, undecorated
from ratewarden.tiers import CircuitBreaker

__all__ = ["RateLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@functools.lru_cache(maxsize=64)
def _name(name: str) -> bytes:
    return name.lower().encode("latin-1")


def _encoded(headers: tuple[tuple[str, str], ...]) -> list[tuple[bytes, bytes]]:
    return [(_name(name), value.encode("latin-1")) for name, value in headers]


def _adding(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """``send`` with ``extra`` appended to the response start's headers.

    A plain function handing back ``send``'s own awaitable: no coroutine of its
    own per message (``await`` accepts any awaitable the callable returns).
    """

    def send_with_headers(message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        return send(message)

    return send_with_headers


class RateLimitMiddleware:
    """Limit HTTP requests to ``app`` by the ``rules``, deciding with ``limiter``.

    ``limiter`` is anything with ``async hit(key, rates, cost, *, shadow) -> Decision``:
    an ``AsyncLimiter``, or a two-tier limiter. Decisions marked ``degraded``
    are used as they come, headers included. Endpoints are found with the rule
    set's resolver, or else ``starlette_endpoint``.

    When the limiter raises ``StorageError`` (its store is down or too slow),
    ``failure`` answers: ``"open"`` (default) passes the request on without
    RateLimit headers, ``"closed"`` answers 503 with ``Retry-After``. An optional
    ``breaker`` (``CircuitBreaker``) skips the store while it is open. Each such
    request is counted as ``metrics.degraded(rule=name, ...)`` and logged at most
    once a minute per reason.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: AsyncHitter,
        rules: RuleSet,
        failure: str = "open",
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "middleware",
    ) -> None:
        if not isinstance(rules, RuleSet):
            raise ConfigurationError(f"rules {rules!r} must be a RuleSet")
        if not callable(getattr(limiter, "hit", None)):
            raise ConfigurationError(f"limiter {limiter!r} has no hit(key, rates, cost) method")
        self.app = app
        self.limiter = limiter
        self.rules = rules
        self.failure_policy = FailurePolicy(failure, breaker, metrics, name, rules.clock)
        # What decides: the limiter, behind the breaker when there is one.
        self._limiter = self.failure_policy.guard_async(limiter)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limiter = self._limiter
        now = getattr(limiter, "hit_now", None)
        found: AsgiAnswer = None
        if self.rules.plain_asgi and undecorated(scope):
            # Every rule reads the scope alone (see RuleSet.plain_asgi).
            try:
                if now is not None:
                    found = self.rules.decide_asgi(scope, now)
                else:
                    found = await self.rules.decide_asgi_async(scope, limiter)
            except StorageError as exc:
                found = self.failure_policy.answer(exc)
            if type(found) is list:  # allowed; the headers come encoded
                await self.app(scope, receive, _adding(send, found))
                return
        outcome: Outcome
        if found is not None:
            outcome = found  # type: ignore[assignment]
        else:
            request = from_asgi(scope)
            rules = self.rules.applicable(request, starlette_endpoint)
            if not rules:
                await self.app(scope, receive, send)
                return
            try:
                if now is not None:
                    outcome = self.rules.decide(request, rules, now)
                else:
                    outcome = await drive_async(self.rules.run(request, rules), limiter)
            except StorageError as exc:
                outcome = self.failure_policy.answer(exc, self.rules.enforces(rules))
        if outcome.blocked:
            await self._deny(send, outcome, head=scope.get("method") == "HEAD")
            return
        if not outcome.headers:
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _adding(send, _encoded(outcome.headers)))

    @staticmethod
    async def _deny(send: Send, outcome: Outcome, *, head: bool) -> None:
        """The 429 (the failure policy's 503); a HEAD gets the headers and no body."""
        status = 503 if isinstance(outcome, Unavailable) else 429
        await send(
            {"type": "http.response.start", "status": status, "headers": _encoded(outcome.headers)}
        )
        await send({"type": "http.response.body", "body": b"" if head else outcome.body})
