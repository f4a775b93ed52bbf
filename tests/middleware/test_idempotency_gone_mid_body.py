"""An idempotent request whose client leaves before its body ends runs nothing, locks nothing,
and is counted: ``ratewarden_idempotency_requests_total{outcome="client_gone"}``, so the outcomes
add up to the requests the middleware handled.

On ASGI there is nobody left to answer. On WSGI the server may still deliver an answer (a client
that half-closed): a bare 400. WSGI used to take a body cut short of its ``Content-Length`` for the
whole body: the app ran on the truncated body, its answer was stored, and the client's retry with
the whole body was refused with 422 as another payload.

Driven by hand through the ASGI and WSGI contracts, then over real sockets to werkzeug's threaded
server and to uvicorn, on the memory store and a real redis-server.
"""

from __future__ import annotations

import asyncio
import io
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aredis
from prometheus_client import CollectorRegistry
from werkzeug.serving import make_server

from ratewarden.idempotency import AsyncIdempotencyStore, IdempotencyStore
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from tests._servers import HOST, RedisServer
from tests.idempotency.conftest import unique_prefix
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)

WHOLE = b"x" * 1000
CUT = WHOLE[:10]
KEY = {"Idempotency-Key": "order-1"}


class Counted(PrometheusMetrics):
    """Prometheus counts, and an event set once a request is counted ``client_gone`` (the
    server runs the request in its own thread)."""

    def __init__(self) -> None:
        super().__init__(CollectorRegistry())
        self.gone = threading.Event()

    def idempotency_request(self, *, rule: str, outcome: str) -> None:
        super().idempotency_request(rule=rule, outcome=outcome)
        if outcome == "client_gone":
            self.gone.set()

    def outcomes(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for metric in self.registry.collect():
            for sample in metric.samples:
                if sample.name == "ratewarden_idempotency_requests_total" and sample.value:
                    found[sample.labels["outcome"]] = sample.value
        return found


class AsgiOrders:
    """An ASGI app that records each body it runs on and answers 201."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"created"})


class WsgiOrders:
    """A WSGI app that records each body it runs on and answers 201."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        self.bodies.append(environ["wsgi.input"].read(length))
        start_response("201 Created", [("Content-Type", "text/plain")])
        return [b"created"]


@pytest.fixture(params=["memory", "redis"])
async def async_store(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[AsyncIdempotencyStore]:
    if request.param == "memory":
        yield AsyncMemoryIdempotencyStore()
        return
    client = aredis.Redis(host=HOST, port=redis_server.port)
    yield AsyncRedisIdempotencyStore(client, prefix=unique_prefix())
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
def sync_store(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> Iterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryIdempotencyStore()
        return
    client = redis.Redis(host=HOST, port=redis_server.port)
    yield RedisIdempotencyStore(client, prefix=unique_prefix())
    client.close()


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/orders",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"idempotency-key", b"order-1"), (b"content-length", b"1000")],
        "client": ("127.0.0.1", 5000),
    }


async def test_asgi_a_client_gone_mid_body_is_counted_and_its_retry_runs(
    async_store: AsyncIdempotencyStore,
) -> None:
    """ASGI: 10 bytes then ``http.disconnect``: nothing sent, the app not run, counted
    ``client_gone``; the retry with the whole body runs (nothing was locked)."""
    orders, metrics = AsgiOrders(), Counted()
    app = IdempotencyMiddleware(orders, async_store, metrics=metrics)
    messages = [
        {"type": "http.request", "body": CUT, "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Any] = []

    async def receive() -> Any:
        return messages.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    await app(_scope(), receive, send)
    assert (sent, orders.bodies, metrics.outcomes()) == ([], [], {"client_gone": 1})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        retried = await client.post("/orders", content=WHOLE, headers=KEY)
    assert retried.status_code == 201
    assert orders.bodies == [WHOLE]
    assert metrics.outcomes() == {"client_gone": 1, "ran": 1}


def _environ(body: io.RawIOBase | io.BytesIO, **extra: Any) -> dict[str, Any]:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/orders",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "HTTP_IDEMPOTENCY_KEY": "order-1",
        "wsgi.input": body,
        **extra,
    }


class _Cut(io.RawIOBase):
    """A chunked upload cut short: the server's input fails, as werkzeug's does."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError("Invalid chunk header")


def _call(app: WSGIIdempotencyMiddleware, environ: dict[str, Any]) -> tuple[str, bytes]:
    started: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> Any:
        started.append(status)
        return lambda data: None

    body = b"".join(app(environ, start_response))
    return started[0], body


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param(lambda: _environ(io.BytesIO(CUT), CONTENT_LENGTH="1000"), id="short"),
        pytest.param(lambda: _environ(_Cut(), **{"wsgi.input_terminated": True}), id="chunked"),
    ],
)
def test_wsgi_a_body_cut_short_is_a_bare_400_and_its_retry_runs(
    sync_store: IdempotencyStore, environ: Any
) -> None:
    """WSGI: an input that ends before its Content-Length (or fails) is a bare 400 counted
    ``client_gone``; the app never sees the truncated body, and the whole retry runs."""
    orders, metrics = WsgiOrders(), Counted()
    app = WSGIIdempotencyMiddleware(orders, sync_store, metrics=metrics)
    assert _call(app, environ()) == ("400 Bad Request", b"")
    assert (orders.bodies, metrics.outcomes()) == ([], {"client_gone": 1})
    retried = _call(app, _environ(io.BytesIO(WHOLE), CONTENT_LENGTH="1000"))
    assert retried == ("201 Created", b"created")
    assert orders.bodies == [WHOLE]
    assert metrics.outcomes() == {"client_gone": 1, "ran": 1}


def _send_cut(port: int, *, half_close: bool) -> bytes:
    """POST 10 of 1,000 bytes, then stop sending (half-close) or close; what came back."""
    head = (
        b"POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: order-1\r\nContent-Length: 1000\r\n"
    )
    with socket.create_connection((HOST, port), timeout=10) as conn:
        conn.sendall(head + b"\r\n" + CUT)
        if not half_close:
            return b""
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return answer


def test_werkzeug_a_client_that_stops_mid_body_gets_a_400_and_its_retry_runs(
    sync_store: IdempotencyStore,
) -> None:
    """Over werkzeug's threaded server: the half-closed upload is answered 400, counted
    ``client_gone``, and the whole retry runs once (it was a 200 on the truncated body, and
    the retry a 422)."""
    orders, metrics = WsgiOrders(), Counted()
    server = make_server(
        HOST, 0, WSGIIdempotencyMiddleware(orders, sync_store, metrics=metrics), threaded=True
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        answer = _send_cut(server.port, half_close=True)
        with httpx.Client(base_url=f"http://{HOST}:{server.port}", timeout=10) as client:
            retried = client.post("/orders", content=WHOLE, headers=KEY)
    finally:
        server.shutdown()
        thread.join(10)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert (retried.status_code, retried.text) == (201, "created")
    assert orders.bodies == [WHOLE]
    assert metrics.outcomes() == {"client_gone": 1, "ran": 1}


async def test_uvicorn_a_client_that_leaves_mid_body_is_counted_and_its_retry_runs() -> None:
    """Over uvicorn: a client that closes after 10 of 1,000 bytes is counted ``client_gone``
    (the app not run), and the whole retry runs. (The memory store: uvicorn runs its own
    event loop, which an asyncio Redis client made here is not bound to.)"""
    orders, metrics = AsgiOrders(), Counted()
    store = AsyncMemoryIdempotencyStore()
    with serving(IdempotencyMiddleware(orders, store, metrics=metrics)) as url:
        port = int(url.rsplit(":", 1)[1])
        await asyncio.to_thread(_send_cut, port, half_close=False)
        assert await asyncio.to_thread(metrics.gone.wait, 10)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            retried = await client.post("/orders", content=WHOLE, headers=KEY)
    assert retried.status_code == 201
    assert orders.bodies == [WHOLE]
    assert metrics.outcomes() == {"client_gone": 1, "ran": 1}
