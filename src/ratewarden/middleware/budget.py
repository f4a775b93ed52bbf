"""Token budgets from the middleware (ASGI and WSGI): reserve before the app runs, settle after.

::

    budget = AsyncTokenBudget(store, {"requests": "500/minute", "tokens": "100000/minute"},
                              max_output_tokens=4096)
    app.add_middleware(TokenBudgetMiddleware, budget=budget, key=by_api_key(),
                       estimate=lambda request, body: len(body) // 4, read_body=True,
                       paths=["/v1/**"])
    flask_app.wsgi_app = WSGITokenBudgetMiddleware(flask_app.wsgi_app, budget=TokenBudget(...),
                                                   estimate=..., read_body=True)

For each selected request the middleware reserves ``estimate(request, body)``
on the identity's budget (``reserve_usage``, one store step, all axes or none).
Refused, it answers 429 with the provider-style headers
(``x-ratelimit-*-requests`` / ``-tokens``, the IETF fields with ``qu``,
``Retry-After``) and a problem document; the app never runs. Granted, the app
runs, and the reservation is settled with what the request actually used:

- from ``actual(request, headers)`` when given, called once the response body
  has been sent (so a streaming response can report at its end: through
  ``request.state`` on ASGI, which is ``scope["state"]``; through the WSGI
  environ, which is ``request.raw``);
- else from the response header ``usage_header`` (``x-tokens-used``: the total
  tokens, input and output), read when the response starts;
- else (no usage reported, a malformed value, or the app failed; on WSGI also a
  response closed before its end) the estimate stands: the reservation is
  settled at the estimate and nothing is refunded.

The response carries the provider-style headers of the budget after the
settlement when the usage was known at the start, else after the reservation.

When the budget's store cannot be asked at the reservation (down, too slow),
the failure mode answers (``failure_mode``, as the rate limit middleware's):
``open`` (the default) runs the app with nothing reserved and no budget
headers, ``closed`` answers 503 with ``Retry-After``; never a 500.

Both shells are I/O only: the options, the admission, the headers and the
settle-once rule are ``_budget``'s, run on the budget's limiter (awaited here on
ASGI, blocking on WSGI).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any, ClassVar

from ratewarden.budgets import AsyncTokenBudget, Reservation, TokenBudget
from ratewarden.middleware._budget import (
    TOO_LARGE,
    ActualFunc,
    EstimateFunc,
    Settling,
    SettlingResponse,
    TokenBudgetBase,
    WSGIActualFunc,
)
from ratewarden.middleware._outcome import Outcome, send_asgi, send_wsgi
from ratewarden.middleware._request import (
    ClientGoneError,
    from_asgi,
    from_wsgi,
    read_body,
    replay,
)
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
    "ActualFunc",
    "EstimateFunc",
    "TokenBudgetMiddleware",
    "WSGIActualFunc",
    "WSGITokenBudgetMiddleware",
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
      reason, and the reservations (``budget_reservation``: reserved, refused, settled,
      settle_failed, expired, with their tokens).
    """

    _budget_class = AsyncTokenBudget
    _budget_hint = (
        "an AsyncTokenBudget (a TokenBudget goes with WSGITokenBudgetMiddleware, on WSGI)"
    )

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
            await to_the_end(self.budget.run(settling.settle_flow(None)))

    def _wrap(self, send: Send, settling: Settling[bytes]) -> Send:
        async def send_settling(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                headers = message.get("headers", ())
                used = settling.started(headers)
                if used is not None:
                    await to_the_end(self.budget.run(settling.settle_flow(used)))
                message = {**message, "headers": [*headers, *self.headers_of(settling.decision)]}
            await send(message)
            if kind == "http.response.body" and not message.get("more_body", False):
                await to_the_end(self.budget.run(settling.settle_flow(settling.actual_usage())))

        return send_settling


class WSGITokenBudgetMiddleware(TokenBudgetBase[WSGIApp, TokenBudget, str]):
    """The WSGI twin of ``TokenBudgetMiddleware`` (Flask, Django's ``WSGIHandler``), over a
    ``TokenBudget``; the same keyword arguments.

    ``read_body`` reads ``wsgi.input`` (``Content-Length`` bytes; a chunked body or one
    without a length only when the server marks its input ``wsgi.input_terminated``, else
    the body is ``b""`` as the app would see it), then hands the app a fresh stream with
    ``CONTENT_LENGTH`` set to what was read. ``actual`` gets the headers the app gave
    ``start_response`` and is called when the server has iterated the whole response; a
    response closed before its end, or an app that fails, settles at the estimate when
    the server closes it (the response iterable is wrapped so that ``close()`` reaches
    the app's iterable first).
    """

    _budget_class = TokenBudget
    _budget_hint = "a TokenBudget (an AsyncTokenBudget goes with TokenBudgetMiddleware, on ASGI)"

    #: A request whose body ended before its Content-Length (the client left, or the
    #: server's input failed): not reserved, not run, answered for the record.
    _GONE: ClassVar[Outcome] = Outcome(True, (("Content-Length", "0"),), b"", 400)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = from_wsgi(environ)
        if not self.selection.matches(request):
            return self.app(environ, start_response)
        head = request.method == "HEAD"
        body = b""
        if self.read_body:
            try:
                read = _read_wsgi_body(environ, self.max_body)
            except ClientGoneError:
                return send_wsgi(start_response, self._GONE, head=head)
            if read is None:
                return send_wsgi(start_response, TOO_LARGE, head=head)
            body = read
        found: Reservation | Outcome = self.budget.run(self.admit_flow(request, body))
        if isinstance(found, Outcome):
            if found.blocked:
                return send_wsgi(start_response, found, head=head)
            return self.app(environ, start_response)  # open: nothing reserved, nothing to settle
        settling: Settling[str] = Settling(self, request, found)

        def start_settling(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            used = settling.started(headers)
            if used is not None:
                self.budget.run(settling.settle_flow(used))
            return start_response(
                status, [*headers, *self.header_fields(settling.decision)], exc_info
            )

        try:
            result = self.app(environ, start_settling)
        except BaseException:
            self.budget.run(settling.settle_flow(None))
            raise
        return SettlingResponse(result, settling, self.budget)


def _content_length(environ: dict[str, Any]) -> int | None:
    """The request's Content-Length as werkzeug reads it: None for a chunked body or none
    given, 0 for a value that is not a whole number."""
    if str(environ.get("HTTP_TRANSFER_ENCODING", "")).strip().lower() == "chunked":
        return None
    given = environ.get("CONTENT_LENGTH")
    if given is None or str(given).strip() == "":
        return None
    text = str(given).strip()
    return int(text) if text.isascii() and text.isdigit() else 0


def _read_wsgi_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """A WSGI request's body, or None when it passes ``limit`` bytes (413; not read at all
    when its Content-Length says so). A body read is handed back to the app as a fresh
    ``wsgi.input`` with ``CONTENT_LENGTH`` its length. A body without a length (chunked, or
    none given) is read to its end only when the server terminates the input
    (``wsgi.input_terminated``); else nothing can be read safely, and the body is ``b""``,
    as werkzeug would give the app. Raises ``ClientGoneError`` when the input ends before
    its Content-Length, or fails."""
    length = _content_length(environ)
    if length is not None and length > limit:
        return None
    if length == 0 or (length is None and not environ.get("wsgi.input_terminated")):
        return b""
    wanted = length if length is not None else limit + 1
    stream = environ["wsgi.input"]
    chunks: list[bytes] = []
    size = 0
    try:
        while size < wanted:
            chunk = stream.read(min(wanted - size, 64 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ClientGoneError from exc
    if size > limit:
        return None
    if length is not None and size < length:
        raise ClientGoneError
    body = b"".join(chunks)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(size)
    return body
