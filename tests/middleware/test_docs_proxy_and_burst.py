"""What middleware.md says about trusting whole ranges, underscore header names under
wsgiref, and a burst's ``r`` above ``q``, checked on real servers and apps (these document
behaviour the middleware cannot change, so they pass before and after the docs did)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, Rate
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_client_ip,
)
from ratewarden.middleware._request import from_wsgi
from tests.middleware._helpers import ok


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""


@pytest.fixture
def wsgiref_app() -> Iterator[tuple[int, list[str]]]:
    """A WSGI app under wsgiref behind the middleware, trusting 127.0.0.1 as its proxy;
    yields its port and the identities it saw."""
    seen: list[str] = []
    key = by_client_ip(["127.0.0.1"])

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(key(from_wsgi(environ)) or "")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    rules = RuleSet([Rule("per-ip", "2/minute")], default_key=key)
    wrapped = WSGIRateLimitMiddleware(app, limiter=Limiter(MemoryStore()), rules=rules)
    server: WSGIServer = make_server("127.0.0.1", 0, wrapped, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _raw_get(port: int, lines: list[str]) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        head = "\r\n".join(["GET / HTTP/1.0", "Host: t", *lines, "", ""])
        conn.sendall(head.encode())
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    return reply


def test_wsgiref_maps_an_underscore_name_onto_the_proxy_s_header(
    wsgiref_app: tuple[int, list[str]],
) -> None:
    """From the trusted peer, X-Forwarded-For (the proxy's) plus a client's X_Forwarded_For
    line after it: wsgiref joins both into HTTP_X_FORWARDED_FOR, and the client's, read
    first, is the identity: a fresh one per request. middleware.md says to use a server or
    proxy that drops such names."""
    port, seen = wsgiref_app
    for i in (1, 2, 3):
        reply = _raw_get(port, ["X-Forwarded-For: 198.51.100.20", f"X_Forwarded_For: 6.6.6.{i}"])
        assert reply.startswith(b"HTTP/1.0 200")
    assert seen == ["ip:6.6.6.1", "ip:6.6.6.2", "ip:6.6.6.3"]


def test_inside_a_trusted_range_a_caller_names_any_address_of_it() -> None:
    """Every hop trusted: the leftmost is the client, so 10.9.9.9 is whatever it wrote."""
    key = by_client_ip(["10.0.0.0/8"])
    environ = {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": "10.9.9.9"}
    assert key(from_wsgi(environ)) == "ip:10.9.9.9"


async def test_a_burst_shows_r_above_q() -> None:
    """Rate(10, 60, burst=30): the first request shows q=10;w=60 and r=29;t=6."""
    app = Starlette(routes=[Route("/", ok)])
    rules = RuleSet([Rule("c", Rate(10, 60, burst=30))])
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore()), rules=rules)
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        first = await client.get("/")
    assert first.headers["ratelimit-policy"] == '"c";q=10;w=60'
    assert first.headers["ratelimit"] == '"c";r=29;t=6'
