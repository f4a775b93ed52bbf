"""``RateLimitMiddleware``: pure ASGI rate limiting for Starlette, FastAPI or any ASGI app.

::

    rules = RuleSet([Rule("per-ip", "1000/minute"), Rule("contract", "100/minute",
                     key=by_api_key(), cost={"GET": 1, "POST": 5})])
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(store), rules=rules)

Non-HTTP scopes (``websocket``, ``lifespan``) pass through untouched. An
allowed request goes on to the app, and the RateLimit headers are added to its
response start; a denied one is answered here with 429. When the limiter's
store fails, the failure mode answers (``_failure``): by default the request
goes on unchecked; never a 500. Nothing imports
Starlette: the route lookup for ``@exempt`` / ``@limit`` / ``@override``
(``starlette_endpoint``, the default resolver) runs only when the scope's
``app`` has routes.
"""

from __future__ import annotations

from collections.abc import Awaitable

from ratewarden.errors import StorageError
from ratewarden.middleware._base import RateLimitBase
from ratewarden.middleware._compiled import AsgiAnswer, AsyncHitter
from ratewarden.middleware._outcome import PASS, Outcome, encoded, send_asgi
from ratewarden.middleware._request import from_asgi
from ratewarden.middleware._routes import starlette_endpoint, undecorated
from ratewarden.middleware._types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RateLimitMiddleware"]


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


class RateLimitMiddleware(RateLimitBase[ASGIApp, AsyncHitter]):
    """Limit HTTP requests to ``app`` by the ``rules``, deciding with ``limiter``.

    ``limiter`` is anything with ``async hit(key, rates, cost, *, shadow) -> Decision``:
    an ``AsyncLimiter``, or a two-tier limiter. Endpoints are found with the rule
    set's resolver, or else ``starlette_endpoint``.

    ``failure_mode`` is what a request gets when the limiter's store is down or
    too slow: ``"open"`` (default) passes it on without RateLimit headers,
    ``"closed"`` answers 503 with ``Retry-After``. A ratewarden limiter without a
    failure mode of its own takes this one with every hit (its breaker, if it
    has one, skips the store while open); one with its own (``AsyncTwoTier``)
    answers with it, and its degraded decisions are used as they come, headers
    included. Each request the middleware's failure mode answers is counted as
    ``metrics.degraded(rule=name, ...)`` and logged at most once a minute per
    reason. ``failure`` is the deprecated name of ``failure_mode``, and
    ``breaker`` is deprecated: give the limiter its breaker.
    """

    def _prepare(self) -> None:
        # The limiter's hit without an await when it decides in this process (hit_now),
        # and then the rule set's scope path bound to it (see RuleSet.scope_decider).
        self._now = getattr(self.limiter, "hit_now", None)
        self._scope_path = (
            None if self._now is None else self.rules.scope_decider(self._now, self.own_answer)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rules = self.rules
        found: AsgiAnswer = None
        if rules.plain_asgi and undecorated(scope):
            # Every rule reads the scope alone (see RuleSet.plain_asgi).
            decide = self._scope_path
            try:
                if decide is not None:
                    found = decide(scope)
                else:
                    found = await rules.decide_asgi_async(scope, self.limiter, self.own_answer)
            except StorageError as exc:
                found = self.failed(exc)
            if type(found) is list:  # allowed; the headers come encoded
                await self.app(scope, receive, _adding(send, found))
                return
        outcome: Outcome
        if found is not None:
            outcome = found  # type: ignore[assignment]
        else:
            # The general path: the request view, its route's rules, each rule's hit.
            request = from_asgi(scope)
            applicable = rules.applicable(request, starlette_endpoint)
            outcome = await self.decide_awaited(request, applicable) if applicable else PASS
        if outcome.blocked:
            await send_asgi(send, outcome, head=scope.get("method") == "HEAD")
            return
        if not outcome.headers:
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _adding(send, encoded(outcome.headers)))
