"""A response is stored before the client can have all of it.

A client that retries the moment the first answer arrives must get the replay, not a
409 "still in progress" because the middleware stores the response only once the app
has wound down (Django's ASGI handler closes its response after the last body message).
Each test makes the retry from inside the server's own sending of the last part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from io import BytesIO
from typing import Any

from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore, MemoryIdempotencyStore

SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/pay",
    "query_string": b"",
    "headers": [(b"idempotency-key", b"pay-1"), (b"content-length", b"6")],
}


def test_asgi_retry_at_the_last_body_message_is_replayed() -> None:
    """The app sends its body in two messages, then takes its time to return; the retry
    made when the last message reaches the server is a replay of the whole response."""
    runs: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        runs.append(1)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"paid ", "more_body": True})
        await send({"type": "http.response.body", "body": b"once"})
        await asyncio.sleep(0)  # winding down after the answer has gone out

    middleware = IdempotencyMiddleware(app, AsyncMemoryIdempotencyStore())

    async def request(on_last: Any = None) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        parts = [{"type": "http.request", "body": b"10 EUR", "more_body": False}]

        async def receive() -> dict[str, Any]:
            return parts.pop(0) if parts else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            last = message["type"] == "http.response.body" and not message.get("more_body")
            if last and on_last is not None:
                await on_last()

        await middleware(dict(SCOPE), receive, send)
        return sent

    async def scenario() -> list[dict[str, Any]]:
        retried: list[dict[str, Any]] = []

        async def retry() -> None:
            retried.extend(await request())

        await request(retry)
        return retried

    retried = asyncio.run(scenario())
    assert retried[0]["status"] == 201
    assert (b"idempotent-replayed", b"true") in list(retried[0]["headers"])
    assert retried[1]["body"] == b"paid once"
    assert runs == [1]


def test_wsgi_retry_at_the_last_chunk_is_replayed() -> None:
    """The app answers in two chunks; the retry made when the server takes the last one
    is a replay of the whole response."""
    runs: list[int] = []

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        runs.append(1)
        start_response("201 Created", [("Content-Type", "text/plain")])
        return [b"paid ", b"once"]

    middleware = WSGIIdempotencyMiddleware(app, MemoryIdempotencyStore())

    def request() -> tuple[str, list[tuple[str, str]], list[bytes]]:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/pay",
            "QUERY_STRING": "",
            "CONTENT_LENGTH": "6",
            "HTTP_IDEMPOTENCY_KEY": "pay-1",
            "wsgi.input": BytesIO(b"10 EUR"),
        }
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            started.append((status, headers))
            return lambda data: None

        chunks: list[bytes] = []
        result = middleware(environ, start_response)
        try:
            for chunk in result:
                chunks.append(chunk)
                if chunk == b"once" and not retried:
                    retried.append(request())
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        return started[0][0], started[0][1], chunks

    retried: list[tuple[str, list[tuple[str, str]], list[bytes]]] = []
    first = request()
    assert first[0].startswith("201") and b"".join(first[2]) == b"paid once"
    status, headers, body = retried[0]
    assert status.startswith("201")
    assert ("Idempotent-Replayed", "true") in [(n.title(), v) for n, v in headers]
    assert b"".join(body) == b"paid once"
    assert runs == [1]
