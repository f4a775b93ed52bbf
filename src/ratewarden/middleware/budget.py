"""Token budgets from the middleware (ASGI): reserve before the app runs, settle after.

::

    budget = AsyncTokenBudget(store, {"requests": "500/minute", "tokens": "100000/minute"},
                              max_output_tokens=4096)
    app.add_middleware(TokenBudgetMiddleware, budget=budget, key=by_api_key(),
                       estimate=lambda request, body: len(body) // 4, read_body=True,
                       paths=["/v1/**"])

For each selected request the middleware reserves ``estimate(request, body)``
on the identity's budget (``reserve_usage``, one store step, all axes or none).
Refused, it answers 429 with the provider-style headers
(``x-ratelimit-*-requests`` / ``-tokens``, the IETF fields with ``qu``,
``Retry-After``) and a problem document; the app never runs. Granted, the app
runs, and the reservation is settled with what the request actually used:

- from ``actual(request, headers)`` when given, called once the response body
  has been sent (so a streaming response can report at its end, e.g. through
  ``request.state``, which is ``scope["state"]``);
- else from the response header ``usage_header`` (``x-tokens-used``: the total
  tokens, input and output), read when the response starts;
- else (no usage reported, a malformed value, or the app failed) the estimate
  stands: the reservation is settled at the estimate and nothing is refunded.

The response carries the provider-style headers of the budget after the
settlement when the usage was known at the start, else after the reservation.

When the budget's store cannot be asked at the reservation (down, too slow),
the failure mode answers (``failure_mode``, as the rate limit middleware's):
``open`` (the default) runs the app with nothing reserved and no budget
headers, ``closed`` answers 503 with ``Retry-After``; never a 500.

The middleware is I/O only: the options, the admission, the headers and the
settle-once rule are ``_budget``'s flows, awaited here on the budget's limiter.
"""

from __future__ import annotations

from ratewarden.budgets import AsyncTokenBudget, Reservation
from ratewarden.middleware._budget import (
    TOO_LARGE,
    ActualFunc,
    EstimateFunc,
    Settling,
    TokenBudgetBase,
)
from ratewarden.middleware._outcome import Outcome, send_asgi
from ratewarden.middleware._request import (
    ClientGoneError,
    from_asgi,
    read_body,
    replay,
)
from ratewarden.middleware._types import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
)

__all__ = [
    "ActualFunc",
    "EstimateFunc",
    "TokenBudgetMiddleware",
]


class TokenBudgetMiddleware(TokenBudgetBase[ASGIApp, AsyncTokenBudget, bytes]):
    """Reserve on an ``AsyncTokenBudget`` before the app, settle with the actual use after.

    - ``budget``: the ``AsyncTokenBudget`` (memory or Redis).
    - ``estimate``: ``(request, body) -> Usage | int``; see ``EstimateFunc``.
    - ``key``: the identity (default: the client address); ``fallback`` when it has none.
    - ``name``: the prefix of the budget key, ``<name>:<identity>``.
    - ``actual``: ``(request, response headers) -> Usage | int | None``, after the body.
    - ``usage_header``: the response header with the total tokens used, when no ``actual``.
    - ``read_body``: read the request body (up to ``max_body`` bytes, else 413) and hand it
      to ``estimate``; the app still receives it.
    - ``paths`` / ``methods``: which requests are budgeted (all by default).
    - ``ietf``: add the IETF ``RateLimit-Policy`` / ``RateLimit`` fields with ``qu``.
    - ``failure_mode``: ``"open"`` or ``"closed"``, when the store fails at the
      reservation (``failure`` is its deprecated name); ``metrics`` counts those requests
      (``degraded``, rule ``name``), logged on the ``clock`` at most once a minute per
      reason.
    """

    _budget_class = AsyncTokenBudget
    _budget_hint = "an AsyncTokenBudget"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = from_asgi(scope)
        if not self.selection.matches(request):
            await self.app(scope, receive, send)
            return
        body = b""
        if self.read_body:
            try:
                read = await read_body(receive, self.max_body)
            except ClientGoneError:  # the client left before its body ended: no one to answer
                return
            if read is None:
                await send_asgi(send, TOO_LARGE, head=False)
                return
            body = read
            receive = replay(body, receive)
        found: Reservation | Outcome = await self.budget.run(self.admit_flow(request, body))
        if isinstance(found, Outcome):
            if found.blocked:
                await send_asgi(send, found, head=request.method == "HEAD")
            else:  # open: the app runs with nothing reserved, so nothing to settle
                await self.app(scope, receive, send)
            return
        settling: Settling[bytes] = Settling(self, request, found)
        try:
            await self.app(scope, receive, self._wrap(send, settling))
        finally:
            await self.budget.run(settling.settle_flow(None))

    def _wrap(self, send: Send, settling: Settling[bytes]) -> Send:
        async def send_settling(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                headers = message.get("headers", ())
                used = settling.started(headers)
                if used is not None:
                    await self.budget.run(settling.settle_flow(used))
                message = {**message, "headers": [*headers, *self.headers_of(settling.decision)]}
            await send(message)
            if kind == "http.response.body" and not message.get("more_body", False):
                await self.budget.run(settling.settle_flow(settling.actual_usage()))

        return send_settling
