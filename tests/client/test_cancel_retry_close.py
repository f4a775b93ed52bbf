"""AsyncRetryTransport cancelled while it closes an unread response before a retry keeps its
httpx pool usable.

Before a retry the transport closes the 503 it will not read; that close is where a
caller's ``wait_for`` or ``asyncio.timeout`` lands, since the wait comes next. httpx gives
the connection back to its pool only at the close's end (httpcore shields it from anyio's
cancel scopes, not from ``task.cancel()``): a close cut short kept its pool slot for ever,
and after ``max_connections`` such cuts every request on the client was a ``PoolTimeout``.

A real uvicorn answers; the inner transport is httpx's own, whose responses' close waits on
a gate that the test opens only after it has cancelled the request, so the cancellation
lands inside the close every time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from ratewarden.client import AsyncRetryTransport, RetryPolicy
from ratewarden.testing import ManualClock
from tests.client._live import LiveASGI

pytestmark = pytest.mark.timeout(30)

#: Connections in the pool; the test cuts more closes than that.
MAX_CONNECTIONS = 2


async def app(scope: Any, receive: Any, send: Any) -> None:
    """``/busy``: 503 with ``Retry-After: 0`` and a body nobody reads; anything else: 200."""
    assert scope["type"] == "http"
    busy = scope["path"] == "/busy"
    headers = [(b"retry-after", b"0")] if busy else []
    await send({"type": "http.response.start", "status": 503 if busy else 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"x" * (100_000 if busy else 2)})


@pytest.fixture(scope="module")
def server() -> Iterator[LiveASGI]:
    live = LiveASGI(app)
    yield live
    live.stop()


class GatedClose(httpx.AsyncByteStream):
    """A response's stream whose close says it began, then waits for ``gate`` (when held)."""

    def __init__(self, stream: httpx.AsyncByteStream, closing: asyncio.Event, held: bool) -> None:
        self.stream = stream
        self.closing = closing
        self.gate = asyncio.Event()
        if not held:
            self.gate.set()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            yield chunk

    async def aclose(self) -> None:
        self.closing.set()
        await self.gate.wait()
        await self.stream.aclose()


class Gated(httpx.AsyncBaseTransport):
    """httpx's transport, each response's close held at a gate (``latest.gate``) while
    ``held``."""

    def __init__(self, inner: httpx.AsyncHTTPTransport) -> None:
        self.inner = inner
        self.closing = asyncio.Event()
        self.held = True
        self.latest: GatedClose | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        self.latest = GatedClose(response.stream, self.closing, self.held)
        response.stream = self.latest
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def first(request: asyncio.Future[Any], event: asyncio.Event) -> None:
    """Return once ``event`` is set or ``request`` has ended, whichever comes first."""
    waiting = asyncio.ensure_future(event.wait())
    await asyncio.wait((request, waiting), return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()


async def test_requests_cancelled_while_closing_a_retried_response_leave_the_pool_usable(
    server: LiveASGI,
) -> None:
    """``MAX_CONNECTIONS + 3`` requests, each cancelled inside the close of its 503: the
    pool has every connection back, and requests after them are answered (before: the
    pool was full of connections nobody held, and every request a PoolTimeout)."""
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=MAX_CONNECTIONS))
    gated = Gated(inner)
    transport = AsyncRetryTransport(gated, policy=RetryPolicy(max_attempts=3), clock=ManualClock())
    timeout = httpx.Timeout(5.0, pool=0.5)  # a pool with no connection left fails fast
    client = httpx.AsyncClient(transport=transport, base_url=server.url, timeout=timeout)
    async with client:
        for i in range(MAX_CONNECTIONS + 3):
            gated.closing.clear()
            request = asyncio.ensure_future(client.get("/busy"))
            await first(request, gated.closing)  # the 503 is being closed before the retry
            if request.done():  # the pool had no connection left for it
                pytest.fail(f"request {i} never got its 503: {request.exception()!r}")
            assert gated.latest is not None
            request.cancel()
            gated.latest.gate.set()  # after the cancel: the close is cut here unless shielded
            with pytest.raises(asyncio.CancelledError):
                await request
        gated.held = False
        for _ in range(MAX_CONNECTIONS + 1):
            assert (await client.get("/ok")).status_code == 200
