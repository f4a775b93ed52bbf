"""Load shedding from the ASGI middleware, through uvicorn over real sockets: classes shed lowest
first as the fleet's in-flight count rises (on memory and on a real redis-server), the slot
held for the whole response and given back at its end, the refusal, classes and selection."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder, ShedDecision
from ratewarden.middleware import SheddingMiddleware, class_from_header
from ratewarden.middleware._shedding import Shedding
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.middleware._shed_apps import (
    BOUND,
    CRITICAL,
    SMALL,
    Gate,
    Gates,
    asgi_serving,
    eventually,
    held,
    starlette_app,
    status_of,
)

pytestmark = pytest.mark.timeout(60)

CLASSES = ("critical", "normal", "batch", "test")


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """An asyncio store: memory, or a real redis-server (emptied first); the app's server
    closes it on its own loop."""
    if request.param == "memory":
        return AsyncMemoryStore()
    redis_server.client().flushall()
    return AsyncRedisStore.from_url(redis_server.url, timeout=2.0)


def test_classes_are_shed_lowest_first_as_in_flight_rises(store: Any) -> None:
    """Capacity 10, the default policy: with 6 streams in flight test and batch are shed and
    normal and critical admitted; with 10, every class; back to 8, normal and below. Once the
    streams end their slots are back and batch is admitted again."""
    gates = Gates()
    shedder = AsyncFleetShedder(AsyncLimiter(store), "api", 10)
    app = starlette_app(shedder, gates)
    seen = {}
    with asgi_serving(app, store) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 6, "/hold?until=six") as six, held(client, 2, "/hold?until=two") as two:
            with held(client, 2, "/hold?until=last") as last:
                seen[10] = [status_of(client, c) for c in CLASSES]
                gates.gate("last").open()
                for chunks in last:
                    assert b"".join(chunks) == b"last"
            # 8 in flight once those two slots are back
            first = eventually(lambda: status_of(client, "critical"), 200)
            seen[8] = [first, *(status_of(client, c) for c in CLASSES[1:])]
            gates.gate("two").open()
            for chunks in two:
                assert b"".join(chunks) == b"last"
            first = eventually(lambda: status_of(client, "normal"), 200)
            seen[6] = [
                status_of(client, "critical"),
                first,
                *(status_of(client, c) for c in CLASSES[2:]),
            ]
            gates.gate("six").open()
            for chunks in six:
                assert b"".join(chunks) == b"last"
        after = eventually(lambda: status_of(client, "test"), 200)
    assert seen[10] == [503, 503, 503, 503]
    assert seen[8] == [200, 503, 503, 503]
    assert seen[6] == [200, 200, 503, 503]
    assert after == 200


def test_a_shed_request_gets_503_retry_after_and_a_problem_document() -> None:
    """The refusal: 503, Retry-After, no caching, a problem document naming the class, the
    utilization and its ceiling; a HEAD gets the headers and no body; the app never runs."""
    gates = Gates()
    shedder = AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "api", 10)
    app = starlette_app(shedder, gates)
    with (
        asgi_serving(app) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
        held(client, 6),
    ):
        shed = client.get("/quick", headers={"x-priority": "batch"})
        head = client.head("/quick", headers={"x-priority": "batch"})
        gates.finish.open()
    assert shed.status_code == 503
    assert shed.headers["retry-after"] == "1"
    assert shed.headers["cache-control"] == "no-store"
    assert shed.headers["content-type"] == "application/problem+json"
    assert not [n for n in shed.headers if n.startswith(("ratelimit", "x-ratelimit"))]
    problem = json.loads(shed.content)
    assert problem["title"] == "Service Unavailable"
    assert (problem["status"], problem["traffic_class"]) == (503, "batch")
    assert (problem["utilization"], problem["ceiling"]) == (0.6, 0.6)
    assert (head.status_code, head.content) == (503, b"")
    assert head.headers["content-length"] == shed.headers["content-length"]


def test_status_429_and_another_retry_after_when_asked() -> None:
    """``status=429`` answers Too Many Requests; ``retry_after=0`` leaves the header out."""
    level = {"now": 0.9}
    app = starlette_app(LoadShedder(lambda: level["now"]), Gates(), status=429, retry_after=0)
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        shed = client.get("/quick", headers={"x-priority": "normal"})
    assert shed.status_code == 429
    assert "retry-after" not in shed.headers
    assert json.loads(shed.content)["title"] == "Too Many Requests"


def test_the_slot_goes_back_at_the_last_chunk_not_after_background_work() -> None:
    """A stream's slot is given back once its body is sent, while a background task it started
    still runs: a batch request (1 slot of 2) is then admitted."""
    gates = Gates()
    shedder = AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "api", 2, policy=SMALL)
    app = starlette_app(shedder, gates)
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 1, path="/hold?background") as (stream,):
            during = status_of(client, "batch")
            gates.finish.open()
            assert b"".join(stream) == b"last"
        assert gates.body_done.wait(BOUND)
        after_body = eventually(lambda: status_of(client, "batch"), 200)
        gates.background.open()
    assert (during, after_body) == (503, 200)


def test_a_client_that_disconnects_gives_its_slot_back() -> None:
    """A client that closes its connection mid-stream: the app is cancelled and the slot goes
    back, though the response never ended."""
    gates = Gates()
    shedder = AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "api", 2, policy=SMALL)
    app = starlette_app(shedder, gates)
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 1):
            during = status_of(client, "batch")
        # left without reading to the end: the connection is closed
        after = eventually(lambda: status_of(client, "batch"), 200)
        gates.open_all()
    assert (during, after) == (503, 200)


def test_a_long_stream_renews_its_slot_as_it_sends() -> None:
    """Chunks sent 12 s apart keep the slot (TTL 30 s) past 48 s; 31 s without one lose it."""
    clock = ManualClock()
    steps = [Gate() for _ in range(6)]
    sent = [threading.Event() for _ in range(6)]

    async def stream(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for i in range(6):
                await steps[i].until_open()
                yield b"chunk"
                sent[i].set()  # resumed: the chunk was sent (and the slot renewed, if due)

        return StreamingResponse(body())

    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    shedder = AsyncFleetShedder(
        AsyncLimiter(AsyncMemoryStore(clock=clock)), "api", 2, policy=SMALL, ttl=30
    )
    app = Starlette(routes=[Route("/stream", stream), Route("/quick", ok)])
    app.add_middleware(
        SheddingMiddleware, shedder=shedder, classify=class_from_header(), clock=clock
    )
    codes = []
    with (
        asgi_serving(app) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
        client.stream("GET", "/stream", headers=CRITICAL) as response,
    ):
        steps[0].open()
        chunks = response.iter_raw()  # kept: a dropped iterator closes the response
        assert next(chunks) == b"chunk"
        for i in range(1, 5):
            clock.advance(12)  # 48 s in all: past the 30 s TTL, renewed on each chunk
            steps[i].open()
            assert sent[i].wait(BOUND)
            codes.append(client.get("/quick", headers={"x-priority": "batch"}).status_code)
        clock.advance(31)  # a TTL without a chunk
        codes.append(client.get("/quick", headers={"x-priority": "batch"}).status_code)
        steps[5].open()
    assert codes == [503, 503, 503, 503, 200]


def test_a_load_shedder_sheds_by_the_utilization_the_app_reports() -> None:
    """A LoadShedder with the utilization injected: at 0.65 batch and test are shed, at 0.85
    normal too, at 1.0 every class; the refusal names the reading; nothing is held."""
    level = {"now": 0.3}
    app = starlette_app(LoadShedder(lambda: level["now"]), Gates())
    seen = {}
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        for now in (0.3, 0.65, 0.85, 1.0):
            level["now"] = now
            seen[now] = [status_of(client, c) for c in CLASSES]
        level["now"] = 0.65
        problem = client.get("/quick", headers={"x-priority": "batch"}).json()
    assert seen == {
        0.3: [200, 200, 200, 200],
        0.65: [200, 200, 503, 503],
        0.85: [200, 503, 503, 503],
        1.0: [503, 503, 503, 503],
    }
    assert (problem["traffic_class"], problem["utilization"], problem["ceiling"]) == (
        "batch",
        0.65,
        0.6,
    )


def test_selected_paths_only_so_health_checks_are_never_shed() -> None:
    """``paths=["/quick"]``: at full load ``/quick`` is shed and ``/health`` still answers."""
    app = starlette_app(LoadShedder(lambda: 1.0), Gates(), paths=["/quick"])
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        codes = [status_of(client, "critical", path) for path in ("/quick", "/health")]
    assert codes == [503, 200]


def _classified(classify: Any, utilization: float = 0.7, **options: Any) -> list[int]:
    """The statuses of a plain GET, one with ``x-priority: batch`` and one with
    ``x-priority: urgent`` at ``utilization`` (0.7: batch is shed, normal admitted)."""
    shedder = LoadShedder(lambda: utilization)
    app = starlette_app(shedder, Gates(), classify=classify, **options)
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        return [
            client.get("/quick", headers=headers).status_code
            for headers in ({}, {"x-priority": "batch"}, {"x-priority": "urgent"})
        ]


def test_without_classify_every_request_is_the_default_class() -> None:
    """No classify: every request is normal (the policy's second class, not the first), headers
    or not: at 0.85 all are shed; ``default="batch"`` makes every request batch."""
    assert _classified(None) == [200, 200, 200]
    assert _classified(None, 0.85) == [503, 503, 503]
    assert _classified(None, 0.85, default="critical") == [200, 200, 200]
    assert _classified(None, default="batch") == [503, 503, 503]


def test_a_header_class_is_taken_and_an_unknown_one_quietly_gets_the_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``class_from_header``: batch is shed, no header and an unknown value are normal, and a
    client's unknown value is not the app's error: nothing is logged."""
    with caplog.at_level(logging.ERROR, logger="ratewarden.middleware"):
        assert _classified(class_from_header("x-priority")) == [200, 503, 200]
        assert _classified(class_from_header("x-priority", default="batch")) == [503, 503, 503]
    assert caplog.records == []


def test_a_classify_bug_is_logged_and_the_request_gets_the_default_class(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A classify that returns a name the policy lacks, or raises, is the app's bug: the request
    is classed normal (no 500, not shed for it) and an error names it, once a minute."""

    def returns_unknown(request: Any) -> str:
        return request.headers.get("x-priority", "urgent")

    def raises(request: Any) -> str:
        raise KeyError("x-tier")

    with caplog.at_level(logging.ERROR, logger="ratewarden.middleware"):
        assert _classified(returns_unknown) == [200, 503, 200]
        assert _classified(raises) == [200, 200, 200]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "classify returned 'urgent', not a class of the shed policy" in lines[0]
    assert "classify raised KeyError" in lines[1]
    assert all("classed 'normal'" in line for line in lines)


async def test_the_middleware_itself_sends_no_body_to_a_head() -> None:
    """Driven without a server (which would drop a HEAD's body anyway): a shed HEAD is answered
    with the refusal's headers, Content-Length included, and an empty body; a GET gets the
    document. So is the WSGI twin's."""
    from ratewarden.middleware import WSGISheddingMiddleware
    from tests.middleware._helpers import http_scope

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a shed request never reaches the app")

    shedder = LoadShedder(lambda: 1.0)
    asgi = SheddingMiddleware(app, shedder=shedder)
    bodies = {}
    for method in ("HEAD", "GET"):
        sent: list[dict[str, Any]] = []

        async def send(message: Any, sent: list[dict[str, Any]] = sent) -> None:
            sent.append(message)

        scope = http_scope(method, "/", [], client=("127.0.0.1", 1), server=("127.0.0.1", 2))
        await asgi(scope, None, send)  # type: ignore[arg-type]
        assert sent[0]["status"] == 503
        bodies[method] = (dict(sent[0]["headers"])[b"content-length"], sent[1]["body"])
    assert bodies["HEAD"] == (bodies["GET"][0], b"")
    assert bodies["GET"][0] == str(len(bodies["GET"][1])).encode()

    wsgi = WSGISheddingMiddleware(lambda e, s: [b"never"], shedder=shedder)
    started: list[Any] = []
    head = wsgi({"REQUEST_METHOD": "HEAD", "PATH_INFO": "/"}, lambda *a: started.append(a))
    assert (started[0][0], b"".join(head)) == ("503 Service Unavailable", b"")


def test_the_refusal_detail_says_what_shed_the_request() -> None:
    """A fleet of capacity 3: 'normal' (ceiling 0.8) has floor(0.8 * 3) = 2 slots, so it is shed
    at utilization 0.6667; the detail says so in slots rather than 'shed at 0.6667 (the ceiling is
    0.8)', which read as a contradiction. A LoadShedder's reading is at or above the ceiling."""
    fleet = Shedding(FleetShedder(Limiter(MemoryStore()), "api", 3))
    detail = json.loads(fleet.shed(ShedDecision(False, "normal", 2 / 3, 0.8)).body)["detail"]
    assert detail == (
        "Overloaded: 'normal' requests are shed while 2 of the 3 slots are in flight (the "
        "class's ceiling 0.8 of the capacity, in whole slots: utilization 0.6667); retry in 1 s."
    )
    local = Shedding(LoadShedder(lambda: 0.85))
    detail = json.loads(local.shed(ShedDecision(False, "normal", 0.85, 0.8)).body)["detail"]
    assert detail == (
        "Overloaded: 'normal' requests are shed at utilization 0.85, at or above the class's "
        "ceiling of 0.8; retry in 1 s."
    )
