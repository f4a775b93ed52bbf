"""The HTTP port's head limit: a request head over 64 KiB is 431, however its bytes arrive.

h11's own limit refuses a buffer still without a whole head past 64 KiB; a head that
ended in the same read got through, up to about twice the limit. The server now
measures every head it parses as well. Raw sockets run in a thread: the server
shares this event loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from ratewarden.server.http import MAX_HEAD_BYTES, HttpServer
from tests.server_transport._backend import StaticBackend
from tests.server_transport.conftest import HOST, parse_reply

START = b"GET /healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "


def head_of(size: int) -> bytes:
    """A whole GET head of exactly ``size`` bytes (request line, headers, blank line)."""
    return START + b"a" * (size - len(START) - 4) + b"\r\n\r\n"


def send(port: int, data: bytes, piece: int | None = None) -> bytes:
    """Send ``data`` (in ``piece``-byte writes, or one) and read until the server closes."""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        step = piece or len(data)
        for at in range(0, len(data), step):
            try:
                sock.sendall(data[at : at + step])
            except OSError:
                break  # the server answered and closed before the rest
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """A started HttpServer over a backend with no rules; stopped after the test."""
    server = HttpServer(StaticBackend())  # type: ignore[arg-type]
    bound = await server.start(HOST, 0)
    yield bound
    await server.stop(0)


async def test_a_head_of_exactly_64_kib_is_served(port: int) -> None:
    """The limit is inclusive: a head of MAX_HEAD_BYTES bytes gets its answer."""
    reply = parse_reply(await asyncio.to_thread(send, port, head_of(MAX_HEAD_BYTES)))
    assert reply.status == 200


@pytest.mark.parametrize("size", [MAX_HEAD_BYTES + 1, 100_000, 127_000])
async def test_a_whole_head_over_64_kib_in_one_write_is_431(port: int, size: int) -> None:
    """A head one byte over, or up to twice the limit, sent at once: 431 with a message and the
    connection closed (it was served 200 up to about 128 KiB)."""
    reply = parse_reply(await asyncio.to_thread(send, port, head_of(size)))
    assert (reply.status, reply.headers["connection"]) == (431, "close")
    assert reply.body == b"request head over 64 KiB (request line and headers)\n"


async def test_a_head_over_64_kib_in_small_writes_is_431(port: int) -> None:
    """The same head in 8 KiB writes (served 200 up to about 72 KiB before) is 431 too."""
    reply = parse_reply(await asyncio.to_thread(send, port, head_of(72_000), 8192))
    assert reply.status == 431


async def test_a_head_unfinished_past_64_kib_is_431(port: int) -> None:
    """No blank line yet after 64 KiB: h11's own limit, answered 431 as well, not 400."""
    raw = START + b"a" * (MAX_HEAD_BYTES + 1 - len(START))
    reply = parse_reply(await asyncio.to_thread(send, port, raw))
    assert reply.status == 431


async def test_a_later_request_on_a_kept_connection_is_measured_alone(port: int) -> None:
    """Each head counts alone: two 40 KiB heads on one connection are both served."""
    first = head_of(40_000).replace(b"Connection: close", b"Connection: keep-alive")
    reply = await asyncio.to_thread(send, port, first + head_of(40_000))
    assert reply.count(b"HTTP/1.1 200 OK") == 2


async def test_the_431_has_its_standard_reason_phrase(port: int) -> None:
    """The status line was ``HTTP/1.1 431 `` (ratewarden writes this answer itself)."""
    raw = await asyncio.to_thread(send, port, head_of(MAX_HEAD_BYTES + 1))
    assert raw.split(b"\r\n", 1)[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
