"""``HttpServer``: the HTTP port's app served by uvicorn on a socket it binds, on loopback.

What the wrapper owns: binding (port 0, a busy port, IPv6, SO_REUSEPORT), leaving the
process's signal handlers alone, the graceful and bounded stop; and what uvicorn's
HTTP/1.1 does with input the app never sees (not HTTP, a huge head, a body over the limit).
Raw sockets run in a thread (``asyncio.to_thread``): the server shares this event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.http import MAX_HEAD_BYTES, HttpServer
from ratewarden.server.http_app import MAX_BODY_BYTES
from ratewarden.server.logs import LOGGERS, configure_logging
from tests.server_transport.conftest import HOST, http, parse_reply

ONE_KEY = json.dumps({"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]})


class Backend:
    """An HttpBackend whose service answers OK once ``release`` is set (set from the start
    unless a test clears it); ``entered`` is set when a call is waiting."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()
        self.entered = asyncio.Event()

    def serving(self) -> bool:
        return True

    def rules_text(self) -> str:
        return ""

    def rules_dict(self) -> dict[str, Any]:
        return {}

    async def should_rate_limit(self, request: Any) -> Any:
        self.entered.set()
        await self.release.wait()
        return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    def metrics(self, accept: str) -> tuple[bytes, str]:
        return b"", "text/plain"

    def dashboard(self) -> dict[str, Any]:
        return {"rules": []}

    def rlqs_streams(self) -> int | None:
        return None  # RLQS off: /healthcheck says OK alone


Start = Callable[..., Awaitable[tuple[HttpServer, int]]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """``await start(backend, host=HOST, port=0, reuse_port=False)``: a started HttpServer and
    its port; every one is stopped (grace 0) after the test."""
    servers: list[HttpServer] = []

    async def started(
        backend: Backend, host: str = HOST, port: int = 0, *, reuse_port: bool = False
    ) -> tuple[HttpServer, int]:
        server = HttpServer(backend)
        bound = await server.start(host, port, reuse_port=reuse_port)
        servers.append(server)
        return server, bound

    yield started
    for server in servers:
        await server.stop(0)


def exchange(port: int, data: bytes, host: str = HOST) -> bytes:
    """Send ``data`` on a fresh connection without closing our side; all the server sends
    until it closes (blocking, bounded by a 10 s socket timeout)."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


async def test_port_0_binds_a_free_port_and_serves_the_endpoints(start: Start) -> None:
    """start(host, 0) returns the port the kernel picked; the app answers on it."""
    _, port = await start(Backend())
    assert port > 0
    reply = await http(port, "POST", "/json", ONE_KEY.encode())
    assert (reply.status, reply.json()) == (200, {"overallCode": "OK"})


async def test_a_busy_port_is_an_oserror(start: Start) -> None:
    """Binding a port something else listens on raises OSError (app.py says which port)."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        with pytest.raises(OSError):
            await start(Backend(), port=taken.getsockname()[1])


async def test_ipv6_loopback_serves_and_counts_as_loopback(start: Start) -> None:
    """--host ::1: the server listens on IPv6 and the dashboard answers its clients there."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        _, port = await start(Backend(), host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    raw = b"GET /dashboard.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    reply = parse_reply(await asyncio.to_thread(exchange, port, raw, "::1"))
    assert (reply.status, reply.json()) == (200, {"rules": []})


async def test_reuse_port_lets_two_servers_share_a_port(start: Start) -> None:
    """With reuse_port (what --workers uses) a second server binds the first one's port."""
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("no SO_REUSEPORT here")
    _, port = await start(Backend(), reuse_port=True)
    _, again = await start(Backend(), port=port, reuse_port=True)
    assert again == port
    assert (await http(port, "GET", "/healthcheck")).status == 200


async def test_serving_leaves_the_process_signal_handlers_alone(start: Start) -> None:
    """uvicorn would install its own SIGTERM/SIGINT handlers while it serves; ratewarden serve
    owns them (it stops the server itself), so they are the same before, during and after."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    server, port = await start(Backend())
    assert (await http(port, "GET", "/healthcheck")).status == 200
    during = {signum: signal.getsignal(signum) for signum in before}
    await server.stop(0)
    after = {signum: signal.getsignal(signum) for signum in before}
    assert before == during == after


async def test_stop_lets_a_request_in_flight_finish_and_releases_the_port(start: Start) -> None:
    """stop(grace) stops accepting, waits for the running request, which gets its answer;
    then nothing listens on the port."""
    backend = Backend()
    backend.release.clear()
    server, port = await start(backend)
    call = asyncio.create_task(http(port, "POST", "/json", ONE_KEY.encode()))
    await backend.entered.wait()
    stopping = asyncio.create_task(server.stop(10))
    await asyncio.sleep(0)  # let stop() begin before the answer is allowed
    assert not stopping.done()
    backend.release.set()
    async with asyncio.timeout(10):
        reply, _ = await asyncio.gather(call, stopping)
    assert reply.status == 200
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((HOST, port))


async def test_stop_is_bounded_by_grace_when_a_request_hangs(start: Start) -> None:
    """A request that never finishes is cut off once grace is over: stop returns and the client
    gets a 500, not a hang."""
    backend = Backend()
    backend.release.clear()
    server, port = await start(backend)
    call = asyncio.create_task(http(port, "POST", "/json", ONE_KEY.encode()))
    await backend.entered.wait()
    async with asyncio.timeout(5):
        await server.stop(0.2)
        reply = await call
    assert reply.status == 500


async def test_uvicorns_error_lines_are_ratewarden_json_log_lines(
    start: Start, capfd: pytest.CaptureFixture[str]
) -> None:
    """With serve's logging, a request cut off at the end of grace is told in JSON lines (from
    uvicorn's error logger), not in plain text among them; a bad request writes no line."""
    backend = Backend()
    backend.release.clear()
    configure_logging("info", "json")
    try:
        server, port = await start(backend)
        await asyncio.to_thread(exchange, port, b"HELLO\r\n\r\n")
        call = asyncio.create_task(http(port, "POST", "/json", ONE_KEY.encode()))
        await backend.entered.wait()
        await server.stop(0)
        await call
    finally:
        for name in LOGGERS:
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
        logging.getLogger("ratewarden").setLevel(logging.NOTSET)
    lines = capfd.readouterr().err.splitlines()
    entries = [json.loads(line) for line in lines]  # every line is JSON
    assert entries and {(e["logger"], e["level"]) for e in entries} == {("uvicorn.error", "error")}


async def test_what_is_not_http_is_400_and_closed(start: Start) -> None:
    """A request line that is not HTTP: 400, connection closed, and the server still serves."""
    _, port = await start(Backend())
    reply = parse_reply(await asyncio.to_thread(exchange, port, b"HELLO\r\n\r\n"))
    assert reply.status == 400
    assert (await http(port, "GET", "/healthcheck")).status == 200


async def test_a_head_unfinished_after_64_kib_is_refused_with_a_4xx(start: Start) -> None:
    """A head one byte over 64 KiB and not yet ended: a 4xx and a closed connection, no 5xx.
    (Exactly one byte over: the server reads all of it before it answers, so it closes without
    unread bytes, and the kernel sends our client the answer rather than a reset.)"""
    _, port = await start(Backend())
    raw = b"GET /healthcheck HTTP/1.1\r\nHost: x\r\nX-Long: "
    raw += b"a" * (MAX_HEAD_BYTES + 1 - len(raw))
    reply = parse_reply(await asyncio.to_thread(exchange, port, raw))
    assert 400 <= reply.status < 500
    assert b"Traceback" not in reply.body


async def test_a_chunked_body_over_1_mib_is_413_and_closed(start: Start) -> None:
    """A chunked body whose last byte sent is one over the limit: 413 and the connection closed
    (the server does not wait for the rest of the chunk, nor for the end of the body)."""
    _, port = await start(Backend())
    chunk = 64 * 1024
    pieces = [b"%x\r\n%s\r\n" % (chunk, b" " * chunk)] * (MAX_BODY_BYTES // chunk)
    raw = b"POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += b"".join(pieces) + b"2\r\n "
    reply = parse_reply(await asyncio.to_thread(exchange, port, raw))
    assert (reply.status, reply.headers["connection"]) == (413, "close")
    assert reply.body == b"request body over 1 MiB\n"


async def test_a_declared_body_over_1_mib_is_413_before_it_is_sent(start: Start) -> None:
    """Content-Length over the limit is answered from the head alone: the client need not send
    the body (nor a 100-continue wait) to learn it is too large."""
    _, port = await start(Backend())
    raw = b"POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
    reply = parse_reply(await asyncio.to_thread(exchange, port, raw))
    assert (reply.status, reply.headers["connection"]) == (413, "close")
