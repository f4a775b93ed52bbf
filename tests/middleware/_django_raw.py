"""Django's own handlers driven by hand, with no client or server between them and the test to
drop a HEAD's body: what they send, byte for byte."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from werkzeug.test import create_environ

from ratewarden.middleware._types import Message
from tests.middleware._helpers import http_scope

#: What a handler sent: the status, the headers (lower-case names) and every body byte.
Sent = tuple[int, dict[str, str], bytes]


def wsgi_sent(method: str, path: str, headers: dict[str, str] | None = None) -> Sent:
    """``method path`` through Django's WSGI handler, its response iterated and closed."""
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, found: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, found))

    environ = create_environ(path, method=method, headers=headers)
    environ["REMOTE_ADDR"] = "127.0.0.1"
    result = WSGIHandler()(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        result.close()
    status, found = started[0]
    return int(status.split()[0]), {k.lower(): v for k, v in found}, body


async def asgi_sent(
    method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> Sent:
    """``method path`` through Django's ASGI handler (with ``body``, and no Content-Length
    unless ``headers`` give one, as a chunked upload), until its last body message."""
    sent: list[Message] = []
    asked: list[bool] = []
    done = asyncio.Event()

    async def receive() -> Message:
        if not asked:  # the request
            asked.append(True)
            return {"type": "http.request", "body": body}
        await done.wait()  # then the client goes once the response ended
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    raw = [(b"host", b"testserver")]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = http_scope(method, path, raw, client=("127.0.0.1", 1234), server=("testserver", 80))
    await ASGIHandler()(scope, receive, send)
    start = sent[0]
    found = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], found, b"".join(m.get("body", b"") for m in sent[1:])
