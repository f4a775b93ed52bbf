"""The WSGI concurrency and load shedding middlewares give their slot back once the server has
taken the response's last chunk, without waiting for ``close()``.

werkzeug's server skips the iterable's ``close()`` when the client resets the connection just
after the response (its drain of the socket raises first), about 6 times in 10; a slot given
back only by ``close()`` then stayed taken until its TTL, and two such clients locked an API key
out. ``close()`` still gives it back when the server stops early, and never a second time.

The WSGI contract is driven by hand (the response iterated to its end, ``close()`` never
called), on memory and a real redis-server; then a real werkzeug server is sent clients that
reset right after the status line, as a bounded end-to-end check.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from werkzeug.serving import make_server

from ratewarden import Limiter
from ratewarden.budgets import FleetShedder
from ratewarden.metrics import Metrics
from ratewarden.middleware import by_api_key
from ratewarden.middleware.concurrency import WSGIConcurrencyMiddleware
from ratewarden.middleware.shedding import WSGISheddingMiddleware
from ratewarden.storage.memory import MemoryStore
from tests._servers import HOST

pytestmark = pytest.mark.timeout(60)

LIMIT = 2  # the concurrency middleware's slots
CAPACITY = 10  # the fleet shedder's
ENVIRON = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_X_API_KEY": "k1"}


class Body:
    """An app's response iterable that says when it was closed (or fails after ``fail_after``)."""

    def __init__(self, chunks: int = 3, fail_after: int | None = None) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.closed = 0

    def __iter__(self) -> Iterator[bytes]:
        for i in range(self.chunks):
            if i == self.fail_after:
                raise RuntimeError("the model died half-way")
            yield b"chunk,"

    def close(self) -> None:
        self.closed += 1


class Slots(Metrics):
    """Counts the middleware's slot outcomes."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def slot(self, *, rule: str, outcome: str) -> None:
        self.outcomes.append(outcome)


def _start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
    return lambda data: None


#: The middleware, and how many of its slots are held now (read through the public API).
Built = tuple[Callable[..., Iterable[bytes]], Callable[[], int]]


def _concurrency(limiter: Limiter, app: Any, metrics: Metrics | None = None) -> Built:
    middleware = WSGIConcurrencyMiddleware(
        app, limiter=limiter, limit=LIMIT, key=by_api_key(hashed=False), metrics=metrics
    )

    def held() -> int:
        leases = [limiter.acquire_slot("inflight:key:k1", LIMIT, ttl=30) for _ in range(LIMIT)]
        for lease in leases:
            if lease:
                limiter.release_slot(lease)
        return LIMIT - sum(1 for lease in leases if lease)

    return middleware, held


def _shedding(limiter: Limiter, app: Any, metrics: Metrics | None = None) -> Built:
    shedder = FleetShedder(limiter, "api", CAPACITY)

    def held() -> int:
        got = [shedder.acquire("critical") for _ in range(CAPACITY)]
        for acquired in got:
            if acquired:
                shedder.release(acquired.lease)
        return CAPACITY - sum(1 for acquired in got if acquired)

    return WSGISheddingMiddleware(app, shedder=shedder), held


MIDDLEWARES = {"concurrency": _concurrency, "shedding": _shedding}


@pytest.fixture(params=sorted(MIDDLEWARES))
def build(request: pytest.FixtureRequest) -> Callable[..., Built]:
    return MIDDLEWARES[request.param]


def test_a_response_iterated_to_its_end_frees_its_slot_without_close(
    sync_limiter: Limiter, build: Callable[..., Built]
) -> None:
    """WSGI: once the last chunk is taken the slot is free, though the server never closes."""
    body = Body()
    middleware, held = build(sync_limiter, lambda environ, start: body)
    response = middleware(dict(ENVIRON), _start)
    chunks = iter(response)
    assert next(chunks) == b"chunk,"
    assert held() == 1  # while the response is being sent
    assert list(chunks) == [b"chunk,", b"chunk,"]
    assert held() == 0
    assert body.closed == 0  # nobody called close(): the server skipped it


def test_an_app_iterable_that_raises_frees_its_slot_without_close(
    sync_limiter: Limiter, build: Callable[..., Built]
) -> None:
    """The app's iterable failing half-way frees the slot too: the work is over."""
    middleware, held = build(sync_limiter, lambda environ, start: Body(fail_after=1))
    response = middleware(dict(ENVIRON), _start)
    with pytest.raises(RuntimeError, match="half-way"):
        list(response)
    assert held() == 0


def test_close_before_the_end_frees_the_slot_after_closing_the_app_s_iterable(
    build: Callable[..., Built],
) -> None:
    """The server stopping early (the client left mid-stream) frees the slot in close(), once
    the app's iterable is closed."""
    limiter = Limiter(MemoryStore())
    body = Body()
    seen: list[int] = []
    middleware, held = build(limiter, lambda environ, start: body)
    response = middleware(dict(ENVIRON), _start)
    assert next(iter(response)) == b"chunk,"
    original = body.close

    def close() -> None:
        seen.append(held())  # the slot is still held while the app's iterable closes
        original()

    body.close = close  # type: ignore[method-assign]
    response.close()  # type: ignore[attr-defined]
    assert (seen, body.closed, held()) == ([1], 1, 0)


def test_the_end_and_then_close_release_the_slot_once() -> None:
    """A server that takes every chunk and then closes (the usual case) gives the slot back
    once: one ``released``, and the app's iterable closed once."""
    limiter = Limiter(MemoryStore())
    counted = Slots()
    body = Body()
    middleware, held = _concurrency(limiter, lambda environ, start: body, counted)
    response = middleware(dict(ENVIRON), _start)
    list(response)
    response.close()  # type: ignore[attr-defined]
    response.close()  # type: ignore[attr-defined]
    assert counted.outcomes == ["acquired", "released"]
    assert held() == 0


def _done(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"done"]


def _reset_after_status_line(port: int) -> bytes:
    """A client that reads the status line's start, then resets the connection (RST)."""
    with socket.create_connection((HOST, port), timeout=10) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nx-api-key: k1\r\nContent-Length: 0\r\n\r\n")
        first = conn.recv(12)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return first


class Finished:
    """Wraps the middleware: counts requests whose response the server took to its end (after
    the middleware's own end of it) or closed."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.done = threading.Semaphore(0)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        return _Signalled(self.app(environ, start_response), self.done)


class _Signalled:
    def __init__(self, inner: Iterable[bytes], done: threading.Semaphore) -> None:
        self.inner, self.done, self.signalled = inner, done, False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:  # noqa: UP028 (a generator closed early must not close inner)
            yield chunk
        self._signal()

    def close(self) -> None:
        try:
            self.inner.close()  # type: ignore[attr-defined]
        finally:
            self._signal()

    def _signal(self) -> None:
        if not self.signalled:
            self.signalled = True
            self.done.release()


def test_werkzeug_clients_that_reset_after_the_response_leave_every_slot_free(
    sync_limiter: Limiter, build: Callable[..., Built]
) -> None:
    """Over a real werkzeug server: ten clients that reset right after the status line (werkzeug
    then skips close() more often than not) leave every slot free."""
    middleware, held = build(sync_limiter, _done)
    served = Finished(middleware)
    server = make_server(HOST, 0, served, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for _ in range(10):
            assert _reset_after_status_line(server.port) == b"HTTP/1.1 200"
            assert served.done.acquire(timeout=10)  # the server is done with it
    finally:
        server.shutdown()
        thread.join(10)
    assert held() == 0
