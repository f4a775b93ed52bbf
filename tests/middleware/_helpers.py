"""What the middleware tests share: an ``ok`` endpoint, an in-process client, and a whole
ASGI HTTP scope for driving an app by hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


def client_for(app: Any) -> httpx.AsyncClient:
    """An in-process client on ``app``; an exception out of the app becomes the 500 a server
    would send, as with uvicorn."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://t")


def peer_client(app: Any) -> httpx.AsyncClient:
    """An in-process client on ``app`` whose requests come from 198.51.100.4 (the peer an
    ``ip:`` identity reads)."""
    transport = httpx.ASGITransport(app=app, client=("198.51.100.4", 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def http_scope(
    method: str,
    path: str,
    headers: Sequence[tuple[bytes, bytes]],
    *,
    client: tuple[str, int],
    server: tuple[str, int],
) -> dict[str, Any]:
    """An ASGI 3 HTTP/1.1 scope with every key a server sets, for calling an app directly."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": list(headers),
        "client": client,
        "server": server,
    }
