"""``DjangoSheddingMiddleware``: load shedding inside Django's middleware stack, in sync mode
(Django's WSGI handler served by werkzeug's threaded server) and in async mode (Django's ASGI
handler served by uvicorn), over real sockets, on memory and on a real redis-server.

A fleet shedder's slot is held while the view runs and, for a streaming response, until its
last chunk; the refusal, the classes, the failure mode and the counts are the shedding core's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.test import AsyncClient, Client
from django.test.utils import override_settings
from django.urls import path
from prometheus_client import CollectorRegistry

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware import RequestInfo, class_from_header
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT
from tests.middleware._shed_apps import (
    BOUND,
    CRITICAL,
    SMALL,
    Gate,
    Gates,
    asgi_serving,
    eventually,
    held,
    status_of,
    wsgi_serving,
)
from tests.middleware.test_shedding_metrics import shed_counts

pytestmark = pytest.mark.timeout(60)

SHEDDING = "ratewarden.middleware.django_shedding.DjangoSheddingMiddleware"
#: The gates of /hold and /ahold: a test's own (``fresh_gates``).
GATES = [Gates()]
#: Per-chunk gates of /steps and /asteps, and the events set once each chunk was taken.
STEPS: list[Gate] = []
TAKEN: list[threading.Event] = []


def hold(request: HttpRequest) -> StreamingHttpResponse:
    def body() -> Iterator[bytes]:
        yield b"first,"
        GATES[0].finish.wait()
        yield b"last"

    return StreamingHttpResponse(body())


def ahold(request: HttpRequest) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        yield b"first,"
        await GATES[0].finish.until_open()
        yield b"last"

    return StreamingHttpResponse(body())


def steps(request: HttpRequest) -> StreamingHttpResponse:
    def body() -> Iterator[bytes]:
        for gate, taken in zip(STEPS, TAKEN, strict=True):
            gate.wait()
            yield b"chunk"
            taken.set()  # resumed: the chunk was taken (and the slot renewed, if due)

    return StreamingHttpResponse(body())


def asteps(request: HttpRequest) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        for gate, taken in zip(STEPS, TAKEN, strict=True):
            await gate.until_open()
            yield b"chunk"
            taken.set()

    return StreamingHttpResponse(body())


def quick(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def fails(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view fails")


urlpatterns = [
    path("hold", hold),
    path("ahold", ahold),
    path("steps", steps),
    path("asteps", asteps),
    path("quick", quick),
    path("health", quick),
    path("fails", fails),
]


def _settings(middleware: list[str] | None = None, **options: Any) -> override_settings:
    """Django with only the shedding middleware (or ``middleware``), ``options`` as its setting;
    classes from ``x-priority`` unless said otherwise."""
    options.setdefault("classify", class_from_header("x-priority"))
    return override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=middleware or [SHEDDING],
        DEBUG_PROPAGATE_EXCEPTIONS=False,
        RATEWARDEN_SHEDDING=options,
    )


@pytest.fixture(autouse=True)
def fresh_gates() -> Iterator[None]:
    """The views' gates start closed, and are all opened when a test ends."""
    GATES[:] = [Gates()]
    STEPS[:] = [Gate() for _ in range(6)]
    TAKEN[:] = [threading.Event() for _ in range(6)]
    yield
    GATES[0].open_all()
    for gate in STEPS:
        gate.open()


def _shed_while_one_is_held(url: str, stream: str) -> tuple[list[int], dict[str, Any], int]:
    """One critical stream of ``stream`` held (1 slot of 2): the statuses of two batch
    requests and a critical one, the refusal's problem document, and batch's status once the
    stream has ended."""
    with httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 1, stream) as (chunks,):
            codes = [status_of(client, c) for c in ("batch", "batch", "critical")]
            problem = client.get("/quick", headers={"x-priority": "batch"}).json()
            GATES[0].finish.open()
            assert b"".join(chunks) == b"last"
        after = eventually(lambda: status_of(client, "batch"), 200)
    return codes, problem, after


def test_sync_mode_holds_a_stream_s_slot_and_sheds_the_lower_class(sync_limiter: Limiter) -> None:
    """Django's WSGI handler on werkzeug, a FleetShedder of capacity 2 (memory or Redis): while
    a critical stream is open, batch is shed with the problem document and critical admitted;
    once the stream ends, batch is admitted again. Each decision is counted."""
    registry = CollectorRegistry()
    shedder = FleetShedder(sync_limiter, "api", 2, policy=SMALL)
    with (
        _settings(shedder=shedder, metrics=PrometheusMetrics(registry)),
        wsgi_serving(WSGIHandler()) as url,
    ):
        codes, problem, after = _shed_while_one_is_held(url, "/hold")
    assert codes == [503, 503, 200] and after == 200
    assert (problem["status"], problem["traffic_class"], problem["ceiling"]) == (503, "batch", 0.5)
    counts = shed_counts(registry)
    assert counts[("shed", "critical", "admitted")] == 2.0
    assert counts[("shed", "batch", "shed")] >= 3.0  # and the probes' until the slot was back


def test_async_mode_holds_a_stream_s_slot_and_sheds_the_lower_class(async_store: Any) -> None:
    """Django's ASGI handler on uvicorn, an AsyncFleetShedder of capacity 2 (memory or Redis),
    awaited on the event loop: the same answers as in sync mode."""
    registry = CollectorRegistry()
    shedder = AsyncFleetShedder(AsyncLimiter(async_store), "api", 2, policy=SMALL)
    with (
        _settings(shedder=shedder, metrics=PrometheusMetrics(registry)),
        asgi_serving(ASGIHandler(), async_store) as url,
    ):
        codes, problem, after = _shed_while_one_is_held(url, "/ahold")
    assert codes == [503, 503, 200] and after == 200
    assert (problem["status"], problem["traffic_class"], problem["ceiling"]) == (503, "batch", 0.5)
    assert shed_counts(registry)[("shed", "critical", "admitted")] == 2.0


@pytest.mark.parametrize(("mode", "stream"), [("sync", "/hold"), ("async", "/ahold")])
def test_a_client_that_leaves_mid_stream_gives_its_slot_back(mode: str, stream: str) -> None:
    """A client that closes its connection before the stream's end: the slot goes back (the
    server closes the response, or Django stops taking chunks) and batch is admitted again."""
    if mode == "sync":
        shedder: Any = FleetShedder(Limiter(MemoryStore()), "api", 2, policy=SMALL)
    else:
        shedder = AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "api", 2, policy=SMALL)
    serving = wsgi_serving if mode == "sync" else asgi_serving
    with (
        _settings(shedder=shedder),
        serving(WSGIHandler() if mode == "sync" else ASGIHandler()) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
    ):
        with held(client, 1, stream):
            during = status_of(client, "batch")
        # left without reading to the end: the connection is closed
        GATES[0].finish.open()  # a sync stream's thread waits here before its write fails
        after = eventually(lambda: status_of(client, "batch"), 200)
    assert (during, after) == (503, 200)


@pytest.mark.parametrize(("mode", "stream"), [("sync", "/steps"), ("async", "/asteps")])
def test_a_long_stream_renews_its_slot_as_it_streams(mode: str, stream: str) -> None:
    """Chunks taken 12 s apart (on a ManualClock) keep the slot (TTL 30 s) past 48 s; 31 s
    without one lose it, and batch is admitted while the stream is still open."""
    clock = ManualClock()
    if mode == "sync":
        store: Any = MemoryStore(clock=clock)
        shedder: Any = FleetShedder(Limiter(store), "api", 2, policy=SMALL, ttl=30)
    else:
        store = AsyncMemoryStore(clock=clock)
        shedder = AsyncFleetShedder(AsyncLimiter(store), "api", 2, policy=SMALL, ttl=30)
    serving = wsgi_serving if mode == "sync" else asgi_serving
    codes = []
    STEPS[0].open()  # werkzeug sends the headers with the first chunk
    with (
        _settings(shedder=shedder, clock=clock),
        serving(WSGIHandler() if mode == "sync" else ASGIHandler()) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
        client.stream("GET", stream, headers=CRITICAL) as response,
    ):
        chunks = response.iter_raw()  # kept: a dropped iterator closes the response
        assert next(chunks) == b"chunk"
        for i in range(1, 5):
            clock.advance(12)  # 48 s in all: past the 30 s TTL, renewed on each chunk
            STEPS[i].open()
            assert TAKEN[i].wait(BOUND)
            codes.append(status_of(client, "batch"))
        clock.advance(31)  # a TTL without a chunk
        codes.append(status_of(client, "batch"))
        STEPS[5].open()
    assert codes == [503, 503, 503, 503, 200]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_plain_response_or_a_failing_view_gives_the_slot_back(mode: str) -> None:
    """Capacity 2, batch may take 1: batch requests one after another are all admitted, also
    after a view that raised (Django's 500): the slot goes back once the view has returned."""
    if mode == "sync":
        shedder: Any = FleetShedder(Limiter(MemoryStore()), "api", 2, policy=SMALL)
    else:
        shedder = AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "api", 2, policy=SMALL)
    batch = {"x-priority": "batch"}
    with _settings(shedder=shedder):
        if mode == "sync":
            client = Client(raise_request_exception=False)
            codes = [client.get(p, headers=batch).status_code for p in ("/quick", "/fails")]
            codes += [client.get("/quick", headers=batch).status_code for _ in range(2)]
        else:
            aclient = AsyncClient(raise_request_exception=False)
            codes = [
                (await aclient.get(p, headers=batch)).status_code for p in ("/quick", "/fails")
            ]
            codes += [(await aclient.get("/quick", headers=batch)).status_code for _ in range(2)]
    assert codes == [200, 500, 200, 200]


def _classify(request: RequestInfo) -> str | None:
    """Django's own request is ``request.raw.request``: an export is batch."""
    return "batch" if "export" in request.raw.request.GET else None


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_load_shedder_sheds_by_django_s_request_in_either_mode(mode: str) -> None:
    """A LoadShedder at 0.7 fits both modes; ``classify`` reads the HttpRequest (``?export``
    is batch, and shed), a HEAD gets the refusal's headers and no body, ``paths`` leaves
    /health alone; the counts are by class."""
    registry = CollectorRegistry()
    options = {
        "shedder": LoadShedder(lambda: 0.7),
        "classify": _classify,
        "paths": ["/quick"],
        "metrics": PrometheusMetrics(registry),
    }
    with _settings(**options):
        if mode == "sync":
            client = Client()
            got = [client.get("/quick?export"), client.head("/quick?export"), client.get("/quick")]
            got.append(client.get("/health?export"))
        else:
            aclient = AsyncClient()
            got = [await aclient.get("/quick?export"), await aclient.head("/quick?export")]
            got += [await aclient.get("/quick"), await aclient.get("/health?export")]
    shed, head, normal, health = got
    assert (shed.status_code, shed["Retry-After"]) == (503, "1")
    assert shed["Content-Type"] == "application/problem+json"
    assert json.loads(shed.content)["traffic_class"] == "batch"
    assert (head.status_code, head.content) == (503, b"")
    assert head["Content-Length"] == shed["Content-Length"]
    assert (normal.status_code, health.status_code) == (200, 200)
    assert shed_counts(registry) == {
        ("shed", "batch", "shed"): 2.0,
        ("shed", "normal", "admitted"): 1.0,
    }


@pytest.mark.redis
@pytest.mark.parametrize("failure_mode", ["open", "closed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_stopped_redis_is_answered_by_the_failure_mode(
    stopped: str, failure_mode: str, mode: str
) -> None:
    """A fleet shedder on a stopped Redis: open runs the view, closed answers 503; counted in
    ``ratewarden_degraded_total``, not as a shed decision."""
    registry = CollectorRegistry()
    options = {"failure_mode": failure_mode, "metrics": PrometheusMetrics(registry)}
    if mode == "sync":
        store: Any = RedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
        with _settings(shedder=FleetShedder(Limiter(store), "api", 10), **options):
            response = Client().get("/quick")
        store.close()
    else:
        store = AsyncRedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
        with _settings(shedder=AsyncFleetShedder(AsyncLimiter(store), "api", 10), **options):
            response = await AsyncClient().get("/quick")
        await store.aclose()
    if failure_mode == "open":
        assert (response.status_code, response.content) == (200, b"ok")
    else:
        assert (response.status_code, response["Retry-After"]) == (503, "1")
    assert shed_counts(registry) == {}
    degraded = registry.get_sample_value(
        "ratewarden_degraded_total",
        {"rule": "shed", "failure_mode": failure_mode, "reason": "StorageUnavailableError"},
    )
    assert degraded == 1.0


async def test_the_async_mode_s_slot_is_taken_on_the_event_loop() -> None:
    """In async mode the AsyncFleetShedder's acquire runs in the event loop's own thread."""
    seen: list[int] = []
    limiter = AsyncLimiter(AsyncMemoryStore())

    class Noting(AsyncFleetShedder):
        async def acquire(self, traffic_class: str) -> Any:
            seen.append(threading.get_ident())
            return await super().acquire(traffic_class)

    with _settings(shedder=Noting(limiter, "api", 2, policy=SMALL)):
        response = await AsyncClient().get("/quick", headers={"x-priority": "critical"})
    assert response.status_code == 200
    assert seen == [threading.get_ident()]
