"""What a middleware does at a streamed response's end is not cut short by Starlette's cancel.

Starlette's ``StreamingResponse``, under a server whose scope says ASGI ``spec_version``
below 2.4 (uvicorn 0.55 says 2.3; httpx's ``ASGITransport`` says none, read as 2.0),
listens for ``http.disconnect`` beside the stream and cancels the stream's task as soon as
one comes, and those servers send one as soon as the last body message is out. The
concurrency and shedding middlewares give their slot back, and the token budget middleware
settles, right after that message, in that task: the cancellation cut the store call.

Each stream here has Redis's scripts flushed while it runs (as a restart or a failover
does), so the call at its end must load its script again, a second round trip that a cut
call never makes: the slot stayed taken and the estimate charged until their TTL, and
neither was counted. On the memory store nothing waits, so nothing was cut; it is run too,
as the same contract. Driven in process with the scope uvicorn sends, and once through a
real uvicorn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aredis
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ratewarden import AsyncLimiter
from ratewarden.budgets import AsyncFleetShedder, AsyncTokenBudget, Usage
from ratewarden.idempotency import StoredResponse
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware import (
    ConcurrencyMiddleware,
    RequestInfo,
    SheddingMiddleware,
    TokenBudgetMiddleware,
    class_from_header,
)
from ratewarden.middleware._shielded import to_the_end
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncRedisIdempotencyStore
from ratewarden.storage.redis import AsyncRedisStore
from tests._servers import RedisServer
from tests.middleware._helpers import client_for
from tests.middleware._shed_apps import SMALL
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)


def as_uvicorn(app: Any) -> Any:
    """``app`` given the ASGI spec_version uvicorn 0.55 sends (2.3)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        await app({**scope, "asgi": {"version": "3.0", "spec_version": "2.3"}}, receive, send)

    return wrapped


def streaming(flush: Callable[[], Awaitable[None]]) -> Starlette:
    """``/stream`` sends three chunks, calling ``flush()`` before each."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            await flush()
            yield b"x"

    async def stream(request: Request) -> Response:
        return StreamingResponse(chunks())

    return Starlette(routes=[Route("/stream", stream)])


@pytest.fixture
def flush(redis_server: RedisServer) -> Iterator[Callable[[], Awaitable[None]]]:
    """Awaited: flush the scripts of the session's redis-server (from any event loop)."""
    client = redis_server.client()

    async def flush() -> None:
        client.script_flush()

    yield flush
    client.close()


def one(request: RequestInfo) -> str:
    return "one"


def count(registry: CollectorRegistry, metric: str, rule: str, outcome: str) -> float | None:
    return registry.get_sample_value(metric, {"rule": rule, "outcome": outcome})


async def test_the_concurrency_slot_is_given_back_after_a_stream(
    async_store: Any, flush: Callable[[], Awaitable[None]]
) -> None:
    """Limit 1: a stream's slot is given back after its last chunk (counted ``released``),
    so the next stream gets it and the limiter finds it free after both."""
    registry = CollectorRegistry()
    limiter = AsyncLimiter(async_store)
    app = streaming(flush)
    metrics = PrometheusMetrics(registry)
    app.add_middleware(ConcurrencyMiddleware, limiter=limiter, limit=1, key=one, metrics=metrics)
    async with client_for(as_uvicorn(app)) as client:
        assert [(await client.get("/stream")).status_code for _ in range(2)] == [200, 200]
    assert count(registry, "ratewarden_slots_total", "inflight", "released") == 2
    lease = await limiter.acquire_slot("inflight:one", 1, ttl=30)
    assert lease.allowed


async def test_the_shedding_slot_is_given_back_after_a_stream(
    async_store: Any, flush: Callable[[], Awaitable[None]]
) -> None:
    """Batch traffic may take 1 slot of the fleet's 2: a batch stream's slot is given back
    after its last chunk, so the next batch stream is not shed."""
    shedder = AsyncFleetShedder(AsyncLimiter(async_store), "api", 2, policy=SMALL)
    app = streaming(flush)
    app.add_middleware(
        SheddingMiddleware, shedder=shedder, classify=class_from_header("x-priority")
    )
    batch = {"x-priority": "batch"}
    async with client_for(as_uvicorn(app)) as client:
        codes = [(await client.get("/stream", headers=batch)).status_code for _ in range(2)]
    assert codes == [200, 200]


async def test_the_budget_settles_after_a_stream(
    async_store: Any, flush: Callable[[], Awaitable[None]]
) -> None:
    """``actual`` says 30 tokens, known once the body is sent: each stream's 150-token
    estimate is settled to 30 after its last chunk (counted), and the second stream's
    reservation sees the first one's settlement (1000 - 30 - 150 left)."""
    registry = CollectorRegistry()
    limits = {"requests": "100/minute", "tokens": "1000/minute"}
    budget = AsyncTokenBudget(async_store, limits, max_output_tokens=50)
    app = streaming(flush)
    app.add_middleware(
        TokenBudgetMiddleware,
        budget=budget,
        estimate=lambda request, body: Usage.of(100, 50),
        actual=lambda request, headers: 30,
        metrics=PrometheusMetrics(registry),
    )
    async with client_for(as_uvicorn(app)) as client:
        responses = [await client.get("/stream") for _ in range(2)]
    remaining = [r.headers["x-ratelimit-remaining-tokens"] for r in responses]
    assert remaining == ["850", "820"]
    metric = "ratewarden_budget_reservations_total"
    assert count(registry, metric, "budget", "settled") == 2
    tokens = {"rule": "budget", "stage": "settled"}
    assert registry.get_sample_value("ratewarden_budget_tokens_total", tokens) == 60


async def test_a_slot_is_given_back_after_a_stream_served_by_uvicorn(
    redis_server: RedisServer, flush: Callable[[], Awaitable[None]]
) -> None:
    """The same through a real uvicorn (its scope says spec_version 2.3, checked) on a real
    redis-server: three streams one after another, each given the only slot."""
    seen: list[Any] = []
    store = AsyncRedisStore.from_url(redis_server.url, timeout=2.0)
    registry = CollectorRegistry()
    app = streaming(flush)
    metrics = PrometheusMetrics(registry)
    limiter = AsyncLimiter(store)
    app.add_middleware(ConcurrencyMiddleware, limiter=limiter, limit=1, key=one, metrics=metrics)

    async def seeing(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope.get("asgi", {}).get("spec_version"))
        await app(scope, receive, send)

    def three(url: str) -> list[int]:
        return [httpx.get(f"{url}/stream", timeout=10).status_code for _ in range(3)]

    with serving(seeing) as url:
        codes = await asyncio.to_thread(three, url)
    assert seen[0] == "2.3"
    assert codes == [200, 200, 200]
    assert count(registry, "ratewarden_slots_total", "inflight", "released") == 3


class Signalling(AsyncRedisIdempotencyStore):
    """The real Redis store, that says when the middleware starts storing a response."""

    storing: asyncio.Event

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        self.storing.set()
        return await super().complete(key, token, response, ttl)


async def test_an_idempotent_response_is_stored_when_the_client_leaves_meanwhile(
    redis_server: RedisServer,
) -> None:
    """The client goes away while the middleware stores the response, just before the last
    body message: Starlette cancels the stream right then. The response is stored all the
    same, so the retry is a replay (not a 409 while the lock lasts)."""
    client = aredis.Redis(port=redis_server.port)
    store = Signalling(client, prefix="stream-end:")
    store.storing = asyncio.Event()
    runs: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        runs.append(1)
        yield b"paid"

    async def pay(request: Request) -> Response:
        return StreamingResponse(chunks())

    app = Starlette(routes=[Route("/pay", pay, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, store=store)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/pay",
        "raw_path": b"/pay",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"idempotency-key", b"pay-1"), (b"content-length", b"2")],
        "client": ("127.0.0.1", 1234),
        "server": ("t", 80),
    }
    parts = [{"type": "http.request", "body": b"10", "more_body": False}]

    async def leaving(_: Any) -> None:
        """The first attempt's client: it sends its body, then leaves while the response
        is being stored."""

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop(0)
        await store.storing.wait()
        return {"type": "http.disconnect"}

    try:
        await app(scope, receive, leaving)
        async with client_for(app) as retry:
            again = await retry.post("/pay", content=b"10", headers={"idempotency-key": "pay-1"})
    finally:
        await client.aclose()
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == b"paid"
    assert runs == [1]


async def test_to_the_end_finishes_the_work_through_repeated_cancels_then_raises() -> None:
    """A caller cancelled twice while its work waits (as anyio's cancel scopes do, every
    loop turn): the work ends, then the caller's cancellation goes on."""
    go, done = asyncio.Event(), []

    async def work() -> None:
        await go.wait()
        done.append(1)

    caller = asyncio.ensure_future(to_the_end(work()))
    for _ in range(2):
        await asyncio.sleep(0)
        caller.cancel()
    await asyncio.sleep(0)
    assert not caller.done()
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert done == [1]
