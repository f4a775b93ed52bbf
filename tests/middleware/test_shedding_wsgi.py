"""Load shedding from the WSGI middleware, through werkzeug's threaded server over real sockets:
Flask behind a FleetShedder on memory and on a real redis-server (one in-flight count shared
with an ASGI server), the slot given back when the server closes the response, renewed while
it streams, and a LoadShedder's refusals."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from flask import Flask
from flask import Response as FlaskResponse

from ratewarden import AsyncLimiter, Limiter, MemoryStore
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder
from ratewarden.middleware import WSGISheddingMiddleware, class_from_header
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._django import configure_django
from tests._servers import RedisServer
from tests.middleware._shed_apps import (
    BOUND,
    CRITICAL,
    SMALL,
    Gates,
    asgi_serving,
    eventually,
    flask_app,
    held,
    starlette_app,
    status_of,
    wsgi_serving,
)

if not settings.configured:
    configure_django()

from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse
from django.test.utils import override_settings
from django.urls import path

pytestmark = pytest.mark.timeout(60)

CLASSES = ("critical", "normal", "batch", "test")


def test_flask_sheds_classes_lowest_first_as_in_flight_rises(sync_limiter: Limiter) -> None:
    """Capacity 10: with 6 streams open batch and test are shed, normal and critical admitted;
    with 8, normal too; once they are closed, every class is admitted again."""
    gates = Gates()
    app = flask_app(FleetShedder(sync_limiter, "api", 10), gates)
    seen = {}
    with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 6, "/hold?until=six") as six:
            seen[6] = [status_of(client, c) for c in CLASSES]
            with held(client, 2, "/hold?until=two") as two:
                seen[8] = [status_of(client, c) for c in CLASSES]
                gates.gate("two").open()
                for chunks in two:
                    assert b"".join(chunks) == b"last"
            gates.gate("six").open()
            for chunks in six:
                assert b"".join(chunks) == b"last"
        after = eventually(lambda: status_of(client, "test"), 200)
    assert seen[6] == [200, 200, 503, 503]
    assert seen[8] == [200, 503, 503, 503]
    assert after == 200


def test_the_slot_is_held_until_the_server_closes_the_response() -> None:
    """WSGI: a stream's slot is held while it is open and given back once werkzeug has sent it
    and closed the iterable; a view that fails (Flask's 500) gives its slot back too."""
    gates = Gates()
    app = flask_app(FleetShedder(Limiter(MemoryStore()), "api", 2, policy=SMALL), gates)

    @app.get("/boom")
    def boom() -> str:
        raise RuntimeError("the view failed")

    with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 1) as (stream,):
            during = status_of(client, "batch")
            gates.finish.open()
            assert b"".join(stream) == b"last"
        after = eventually(lambda: status_of(client, "batch"), 200)
        # The probe just above holds its slot until werkzeug has closed its response, which
        # the client may see end first: the next request may find it still held.
        failed = eventually(lambda: status_of(client, "batch", "/boom"), 500)
        after_failure = eventually(lambda: status_of(client, "batch"), 200)
    assert (during, after, failed, after_failure) == (503, 200, 500, 200)


def test_a_client_that_disconnects_gives_its_slot_back() -> None:
    """A client that leaves mid-stream: werkzeug's next writes fail, it closes the iterable, and
    the slot goes back long before the app's 64 MiB would have been sent."""
    gates = Gates()
    app = flask_app(FleetShedder(Limiter(MemoryStore()), "api", 2, policy=SMALL), gates)
    with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 1, "/flood"):
            during = status_of(client, "batch")
        gates.finish.open()  # the app writes on to a closed connection
        after = eventually(lambda: status_of(client, "batch"), 200)
    assert (during, after) == (503, 200)


def test_a_long_stream_renews_its_slot_as_it_is_read() -> None:
    """Chunks read 12 s apart keep the slot (TTL 30 s) past 48 s; 31 s without one lose it."""
    clock = ManualClock()
    steps = [threading.Event() for _ in range(6)]
    sent = [threading.Event() for _ in range(6)]
    app = Flask(__name__)

    @app.get("/stream")
    def stream() -> FlaskResponse:
        def body() -> Iterator[bytes]:
            for i in range(6):
                assert steps[i].wait(BOUND)
                yield b"chunk"
                sent[i].set()  # resumed: the chunk was renewed (if due) and written

        return FlaskResponse(body())

    @app.get("/quick")
    def quick() -> str:
        return "ok"

    shedder = FleetShedder(Limiter(MemoryStore(clock=clock)), "api", 2, policy=SMALL, ttl=30)
    app.wsgi_app = WSGISheddingMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, shedder=shedder, classify=class_from_header(), clock=clock
    )
    codes = []
    steps[0].set()  # werkzeug sends the headers with the first chunk
    with (
        wsgi_serving(app) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
        client.stream("GET", "/stream", headers=CRITICAL) as response,
    ):
        chunks = response.iter_raw()  # kept: a dropped iterator closes the response
        assert next(chunks) == b"chunk"
        for i in range(1, 5):
            clock.advance(12)  # 48 s in all: past the 30 s TTL, renewed on each chunk
            steps[i].set()
            assert sent[i].wait(BOUND)
            codes.append(status_of(client, "batch"))
        clock.advance(31)  # a TTL without a chunk
        codes.append(status_of(client, "batch"))
        steps[5].set()
    assert codes == [503, 503, 503, 503, 200]


def test_one_in_flight_count_for_an_asgi_and_a_wsgi_server_on_redis(
    redis_server: RedisServer,
) -> None:
    """Two servers, one Redis key: with 6 streams open on uvicorn (an AsyncFleetShedder), the
    Flask app on werkzeug (a FleetShedder) sheds batch and admits normal and critical."""
    redis_server.client().flushall()
    async_store = AsyncRedisStore.from_url(redis_server.url, timeout=2.0)
    sync_store = RedisStore.from_url(redis_server.url, timeout=2.0)
    asgi_gates, wsgi_gates = Gates(), Gates()
    asgi = starlette_app(AsyncFleetShedder(AsyncLimiter(async_store), "api", 10), asgi_gates)
    wsgi = flask_app(FleetShedder(Limiter(sync_store), "api", 10), wsgi_gates)
    try:
        with (
            asgi_serving(asgi, async_store) as asgi_url,
            wsgi_serving(wsgi) as wsgi_url,
            httpx.Client(base_url=asgi_url, timeout=BOUND) as on_asgi,
            httpx.Client(base_url=wsgi_url, timeout=BOUND) as on_wsgi,
        ):
            with held(on_asgi, 6):
                seen = [status_of(on_wsgi, c) for c in ("critical", "normal", "batch")]
                asgi_gates.finish.open()
            after = eventually(lambda: status_of(on_wsgi, "batch"), 200)
    finally:
        sync_store.close()
    assert seen == [200, 200, 503]
    assert after == 200


def test_a_load_shedder_on_flask_sheds_and_answers_head_without_a_body() -> None:
    """A LoadShedder at utilization 0.65: batch is shed with the problem document, a HEAD gets
    the same headers and no body, normal is admitted; ``methods=["GET", "HEAD"]`` leaves a
    POST alone."""
    app = flask_app(LoadShedder(lambda: 0.65), Gates(), methods=["GET", "HEAD"])

    @app.post("/quick")
    def post() -> str:
        return "posted"

    batch = {"x-priority": "batch"}
    with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        shed = client.get("/quick", headers=batch)
        head = client.head("/quick", headers=batch)
        normal = status_of(client, "normal")
        posted = client.post("/quick", headers=batch)
    assert (shed.status_code, shed.headers["retry-after"]) == (503, "1")
    assert shed.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = json.loads(shed.content)
    assert (problem["traffic_class"], problem["utilization"], problem["ceiling"]) == (
        "batch",
        0.65,
        0.6,
    )
    assert (head.status_code, head.content) == (503, b"")
    assert head.headers["content-length"] == shed.headers["content-length"]
    assert normal == 200
    assert (posted.status_code, posted.text) == (200, "posted")


def django_report(request: HttpRequest) -> HttpResponse:
    return HttpResponse("report")


urlpatterns = [path("report", django_report)]


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])
def test_django_s_wsgi_handler_behind_the_middleware_is_shed() -> None:
    """Django's own WSGIHandler, wrapped and served by werkzeug: at utilization 0.7 a batch
    request is shed before Django sees it, and a normal one reaches the view."""
    app = WSGISheddingMiddleware(
        WSGIHandler(), shedder=LoadShedder(lambda: 0.7), classify=class_from_header()
    )
    with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        shed = client.get("/report", headers={"x-priority": "batch"})
        served = client.get("/report")
    assert (shed.status_code, shed.json()["traffic_class"]) == (503, "batch")
    assert (served.status_code, served.text) == (200, "report")
