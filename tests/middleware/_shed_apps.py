"""What the load shedding middleware tests share: gates a test opens from its own thread, the
apps (Starlette on uvicorn, Flask on werkzeug's threaded server), the servers, streams held
open, and bounded polling."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import httpx
from flask import Flask
from flask import Response as FlaskResponse
from flask import request as flask_request
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from werkzeug.serving import make_server

from ratewarden.budgets import ShedPolicy
from ratewarden.middleware import SheddingMiddleware, WSGISheddingMiddleware, class_from_header
from tests._servers import HOST
from tests.middleware._uvicorn import serving

T = TypeVar("T")

#: Every wait on a gate, and every poll, ends within this many seconds.
BOUND = 10.0

CRITICAL = {"x-priority": "critical"}
#: Two classes on a capacity of 2: batch may take 1 slot, critical both.
SMALL = ShedPolicy((("critical", 1.0), ("batch", 0.5)))


class Gate:
    """Opened from any thread; awaited on a server's event loop or waited on in a WSGI worker's
    thread, for at most ``BOUND`` seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def open(self) -> None:
        with self._lock:
            self._opened.set()
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    async def until_open(self) -> None:
        event = asyncio.Event()
        with self._lock:
            if self._opened.is_set():
                return
            self._waiters.append((asyncio.get_running_loop(), event))
        await asyncio.wait_for(event.wait(), BOUND)

    def wait(self) -> None:
        assert self._opened.wait(BOUND), "the test never opened the gate"


class Gates:
    """When the held streams end (``finish``, or the gate their ``?until=`` names) and their
    background work (``background``); ``body_done`` is set once a stream's body has been sent
    and its background work began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._named: dict[str, Gate] = {}
        self.finish = self.gate("finish")
        self.background = Gate()
        self.body_done = threading.Event()

    def gate(self, name: str) -> Gate:
        """The gate called ``name``, made on first use."""
        with self._lock:
            return self._named.setdefault(name, Gate())

    def open_all(self) -> None:
        with self._lock:
            named = list(self._named.values())
        for gate in [*named, self.background]:
            gate.open()


def starlette_app(shedder: Any, gates: Gates, **options: Any) -> Starlette:
    """``/hold`` streams ``first,`` and ``last`` once ``finish`` (or ``?until=``'s gate) opens
    (with ``?background``,
    then waits for ``background``); ``/quick`` and ``/health`` answer ``ok``. Classes come
    from ``x-priority`` unless ``options`` say otherwise."""

    async def hold(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"first,"
            await gates.gate(request.query_params.get("until", "finish")).until_open()
            yield b"last"

        async def after() -> None:
            gates.body_done.set()
            await gates.background.until_open()

        background = BackgroundTask(after) if "background" in request.query_params else None
        return StreamingResponse(body(), background=background)

    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[
            Route("/hold", hold),
            Route("/quick", ok, methods=["GET", "HEAD"]),
            Route("/health", ok),
        ]
    )
    options.setdefault("classify", class_from_header("x-priority"))
    app.add_middleware(SheddingMiddleware, shedder=shedder, **options)
    return app


def flask_app(shedder: Any, gates: Gates, **options: Any) -> Flask:
    """The Flask twin of ``starlette_app``; ``/flood``, once ``finish`` opens, sends 64 MiB
    (a client that has gone makes a write fail long before its end)."""
    app = Flask(__name__)

    @app.get("/hold")
    def hold() -> FlaskResponse:
        until = gates.gate(flask_request.args.get("until", "finish"))

        def body() -> Iterator[bytes]:
            yield b"first,"
            until.wait()
            yield b"last"

        return FlaskResponse(body())

    @app.get("/flood")
    def flood() -> FlaskResponse:
        def body() -> Iterator[bytes]:
            yield b"first,"
            gates.finish.wait()
            for _ in range(1024):
                yield b"x" * 65536

        return FlaskResponse(body())

    @app.route("/quick", methods=["GET", "HEAD"])
    def quick() -> str:
        return "ok"

    @app.get("/health")
    def health() -> str:
        return "ok"

    options.setdefault("classify", class_from_header("x-priority"))
    app.wsgi_app = WSGISheddingMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, shedder=shedder, **options
    )
    return app


@contextmanager
def asgi_serving(app: Any, store: Any = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn; on exit, close ``store`` (an asyncio store) on the server's
    own event loop, where its connections were made."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        if not loops:
            loops.append(asyncio.get_running_loop())
        await app(scope, receive, send)

    with serving(recorded) as url:
        try:
            yield url
        finally:
            if store is not None and loops and hasattr(store, "aclose"):
                asyncio.run_coroutine_threadsafe(store.aclose(), loops[0]).result(BOUND)


@contextmanager
def wsgi_serving(app: Any) -> Iterator[str]:
    """Serve ``app`` with werkzeug's threaded server (a thread per request); yield its URL."""
    server = make_server(HOST, 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="werkzeug-test", daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.port}"
    finally:
        server.shutdown()
        thread.join(BOUND)


@contextmanager
def held(
    client: httpx.Client, count: int, path: str = "/hold", headers: dict[str, str] = CRITICAL
) -> Iterator[list[Iterator[bytes]]]:
    """``count`` streams of ``path`` open at once, each with its first chunk read (so each has
    its slot); yields their chunk iterators. Leaving closes any stream not read to its end."""
    with ExitStack() as stack:
        streams = []
        for _ in range(count):
            response = stack.enter_context(client.stream("GET", path, headers=headers))
            assert response.status_code == 200, response.read()
            chunks = response.iter_bytes()
            assert next(chunks) == b"first,"
            streams.append(chunks)
        yield streams


def status_of(client: httpx.Client, traffic_class: str, path: str = "/quick") -> int:
    """The status of one request of ``traffic_class``."""
    return client.get(path, headers={"x-priority": traffic_class}).status_code


def eventually(probe: Callable[[], T], wanted: T) -> T:
    """Ask ``probe`` until it answers ``wanted``, for at most ``BOUND`` seconds; the last answer.

    A slot goes back just after the server has sent a response's end, which the client may
    see first: the next request can reach the server a moment before the release.
    """
    deadline = time.monotonic() + BOUND
    while True:
        found = probe()
        if found == wanted or time.monotonic() > deadline:
            return found
        time.sleep(0.01)
