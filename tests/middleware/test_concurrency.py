"""Concurrency slots from the middleware: held while the response is sent, on memory and Redis."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from flask import Flask
from flask import Response as FlaskResponse
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import by_api_key
from ratewarden.middleware.concurrency import ConcurrencyMiddleware, WSGIConcurrencyMiddleware
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)

A = {"x-api-key": "tenant-a"}
B = {"x-api-key": "tenant-b"}


class Gates:
    """Events a streaming endpoint waits on, so a test decides when each part happens."""

    def __init__(self) -> None:
        self.first_sent = asyncio.Event()
        self.finish = asyncio.Event()
        self.body_done = asyncio.Event()
        self.background = asyncio.Event()


def _starlette(limiter: AsyncLimiter, gates: Gates, clock: ManualClock | None = None) -> Starlette:
    async def stream(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"first,"
            gates.first_sent.set()
            await gates.finish.wait()
            yield b"last"

        async def after() -> None:
            gates.body_done.set()
            await gates.background.wait()

        return StreamingResponse(body(), background=BackgroundTask(after))

    async def quick(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def boom(request: Request) -> Response:
        raise RuntimeError("the app failed")

    app = Starlette(routes=[Route("/stream", stream), Route("/quick", quick), Route("/boom", boom)])
    app.add_middleware(
        ConcurrencyMiddleware, limiter=limiter, limit=1, key=by_api_key(), ttl=30, clock=clock
    )
    return app


@pytest.fixture(params=["memory", "redis"])
async def async_limiter(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[AsyncLimiter]:
    """An AsyncLimiter on the memory store or on a real redis-server (emptied first)."""
    if request.param == "memory":
        yield AsyncLimiter(AsyncMemoryStore())
        return
    redis_server.client().flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=2.0)
    try:
        yield AsyncLimiter(store)
    finally:
        await store.aclose()


async def test_a_streaming_response_holds_its_slot_until_its_last_chunk(
    async_limiter: AsyncLimiter,
) -> None:
    """While a stream is open its identity is refused; the slot is free once the body is sent."""
    gates = Gates()
    app = _starlette(async_limiter, gates)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        streaming = asyncio.create_task(c.get("/stream", headers=A))
        await asyncio.wait_for(gates.first_sent.wait(), 5)
        refused = await c.get("/quick", headers=A)
        other = await c.get("/quick", headers=B)
        gates.finish.set()
        await asyncio.wait_for(gates.body_done.wait(), 5)
        # The body is sent; the background task still runs inside the app call.
        during_background = await c.get("/quick", headers=A)
        gates.background.set()
        first = await asyncio.wait_for(streaming, 5)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["cache-control"] == "no-store"
    problem = json.loads(refused.content)
    assert (problem["status"], problem["policy"], problem["limit"]) == (429, "inflight", 1)
    assert other.status_code == 200
    assert during_background.status_code == 200
    assert (first.status_code, first.text) == (200, "first,last")


async def test_a_failing_app_gives_its_slot_back(async_limiter: AsyncLimiter) -> None:
    """An exception in the app releases the slot on its way out."""
    app = _starlette(async_limiter, Gates())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        assert (await c.get("/boom", headers=A)).status_code == 500
        assert (await c.get("/quick", headers=A)).status_code == 200


async def test_a_holder_that_never_finishes_loses_its_slot_after_the_ttl() -> None:
    """A request stuck past the TTL (a dead worker's, in effect) no longer blocks its identity."""
    clock = ManualClock()
    gates = Gates()
    app = _starlette(AsyncLimiter(AsyncMemoryStore(clock=clock)), gates, clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        stuck = asyncio.create_task(c.get("/stream", headers=A))
        await asyncio.wait_for(gates.first_sent.wait(), 5)
        clock.advance(29.9)
        before = await c.get("/quick", headers=A)
        clock.advance(0.2)
        after = await c.get("/quick", headers=A)
        gates.finish.set()
        gates.background.set()
        await asyncio.wait_for(stuck, 5)
    assert (before.status_code, after.status_code) == (429, 200)


async def test_a_long_stream_renews_its_slot_as_it_sends() -> None:
    """Chunks sent a third of a TTL apart keep the slot past the TTL; a TTL of silence loses it."""
    clock = ManualClock()
    sent = asyncio.Queue[None]()
    proceed = asyncio.Queue[None]()

    async def stream(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for _ in range(5):
                yield b"chunk"
                await sent.put(None)
                await proceed.get()

        return StreamingResponse(body())

    async def quick(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/stream", stream), Route("/quick", quick)])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(
        ConcurrencyMiddleware, limiter=limiter, limit=1, key=by_api_key(), ttl=30, clock=clock
    )
    codes = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        streaming = asyncio.create_task(c.get("/stream", headers=A))
        for _ in range(4):
            await asyncio.wait_for(sent.get(), 5)
            clock.advance(12)  # 48 s in all: past the 30 s TTL, renewed on each chunk
            codes.append((await c.get("/quick", headers=A)).status_code)
            await proceed.put(None)
        await asyncio.wait_for(sent.get(), 5)
        clock.advance(31)  # a TTL without a chunk
        codes.append((await c.get("/quick", headers=A)).status_code)
        await proceed.put(None)
        await asyncio.wait_for(streaming, 5)
    assert codes == [429, 429, 429, 429, 200]


def test_through_uvicorn_an_open_stream_is_refused_a_second_slot() -> None:
    """Over a real socket: while the client reads a stream, the same key gets a 503 if so set."""
    release = threading.Event()

    async def stream(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"first,"
            while not release.is_set():
                await asyncio.sleep(0.01)
            yield b"last"

        return StreamingResponse(body())

    app = Starlette(routes=[Route("/stream", stream)])
    app.add_middleware(
        ConcurrencyMiddleware,
        limiter=AsyncLimiter(AsyncMemoryStore()),
        limit=1,
        key=by_api_key(),
        status=503,
        retry_after=2,
    )
    with serving(app) as url, httpx.Client(base_url=url, timeout=5) as client:
        with client.stream("GET", "/stream", headers=A) as first:
            chunks = first.iter_bytes()
            assert next(chunks) == b"first,"
            refused = client.get("/stream", headers=A)
            release.set()
            assert b"".join(chunks) == b"last"
        again = client.get("/stream", headers=A)
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "2")
    assert json.loads(refused.content)["title"] == "Service Unavailable"
    assert (again.status_code, again.text) == (200, "first,last")


def _flask(limiter: Limiter) -> Flask:
    app = Flask(__name__)

    @app.get("/stream")
    def stream() -> FlaskResponse:
        def body() -> Iterator[bytes]:
            yield b"first,"
            yield b"last"

        return FlaskResponse(body())

    @app.get("/boom")
    def boom() -> str:
        raise RuntimeError("the view failed")

    app.wsgi_app = WSGIConcurrencyMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=limiter, limit=1, key=by_api_key()
    )
    return app


def test_flask_holds_the_slot_until_the_server_closes_the_response(sync_limiter: Limiter) -> None:
    """WSGI: the slot is held while the response iterable is open and freed by its close()
    when the server stops before its end (its end frees it too: ``test_wsgi_slot_freed_at_end``)."""
    client = _flask(sync_limiter).test_client()
    first = client.get("/stream", headers=A, buffered=False)
    refused = client.get("/stream", headers=A)
    other = client.get("/stream", headers=B)
    assert next(iter(first.response)) == b"first,"
    still_open = client.get("/stream", headers=A)
    first.close()
    again = client.get("/stream", headers=A)
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
    assert refused.json is not None and refused.json["policy"] == "inflight"
    assert other.status_code == 200
    assert still_open.status_code == 429
    assert (again.status_code, again.data) == (200, b"first,last")


def test_flask_a_failing_view_gives_its_slot_back(sync_limiter: Limiter) -> None:
    """A view that raises (Flask answers 500) does not keep the slot once the response closes."""
    app = _flask(sync_limiter)
    client = app.test_client()
    with client.get("/boom", headers=A) as failed:  # the server closes what it sent
        assert failed.status_code == 500
    assert client.get("/stream", headers=A).status_code == 200


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("limit", 0),
        ("ttl", 0),
        ("status", 500),
        ("retry_after", -1),
        ("name", "a b"),
        ("key", 3),
        ("limt", 2),
        ("methods", "GET POST"),  # one name with a space: it would select no request
        ("methods", []),
    ],
)
def test_bad_options_are_configuration_errors(option: str, value: object) -> None:
    """Each bad option is refused when the middleware is built, naming the option."""
    options: dict[str, object] = {"limit": 2, option: value}
    with pytest.raises(ConfigurationError, match=option if option != "name" else "rule name"):
        WSGIConcurrencyMiddleware(lambda e, s: [b""], limiter=Limiter(), **options)


def test_flask_a_long_stream_renews_its_slot_as_it_is_read() -> None:
    """WSGI: chunks read a third of a TTL apart keep the slot past the TTL; close() frees it."""
    clock = ManualClock()
    app = Flask(__name__)

    @app.get("/stream")
    def stream() -> FlaskResponse:
        return FlaskResponse(iter([b"a", b"b", b"c", b"d", b"e"]))

    app.wsgi_app = WSGIConcurrencyMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        limiter=Limiter(MemoryStore(clock=clock)),
        limit=1,
        key=by_api_key(),
        ttl=30,
        clock=clock,
    )
    client = app.test_client()
    first = client.get("/stream", headers=A, buffered=False)
    chunks = iter(first.response)
    codes = []
    for _ in range(4):
        next(chunks)
        clock.advance(12)  # 48 s in all, past the 30 s TTL
        codes.append(client.get("/stream", headers=A).status_code)
    first.close()
    codes.append(client.get("/stream", headers=A).status_code)
    assert codes == [429, 429, 429, 429, 200]


def test_the_middlewares_know_every_option_of_slot_policy() -> None:
    """The option check and SlotPolicy's signature name the same options."""
    import inspect

    from ratewarden.middleware import concurrency

    assert set(inspect.signature(concurrency.SlotPolicy).parameters) == concurrency._OPTIONS


def test_the_refusal_detail_counts_requests_in_good_grammar() -> None:
    """One slot: 'More than 1 request in flight'; several: 'More than 3 requests in flight'."""
    from ratewarden.middleware import SlotPolicy

    one = json.loads(SlotPolicy(limit=1).body)["detail"]
    assert one == "More than 1 request in flight for 'inflight'; retry in 1 s."
    three = json.loads(SlotPolicy(limit=3, name="db", retry_after=0).body)["detail"]
    assert three == "More than 3 requests in flight for 'db'."
