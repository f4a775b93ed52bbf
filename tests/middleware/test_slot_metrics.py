"""The concurrency middlewares count their slots: ``Metrics.slot``, recorded by
``PrometheusMetrics`` as ``ratewarden_slots_total{rule, outcome}``.

Each slot taken is ``acquired`` and each given back ``released``; a request that finds none
free is ``refused``; a streaming response's renewals are ``renewed``, or ``lapsed`` when the
slot was gone; the store failing at a renewal or a release is ``renew_failed`` or
``release_failed``. Driven through Starlette (httpx in process) and Django's test client
(sync and async mode), on memory and on a real redis-server; each test reads the exact
counts from a fresh registry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client
from django.test.utils import override_settings
from django.urls import path
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, Limiter
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware import ConcurrencyMiddleware, RequestInfo
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._proxy import Fault
from tests.middleware._helpers import client_for
from tests.middleware.conftest import Proxied

pytestmark = pytest.mark.timeout(60)

OUTCOMES = (
    "acquired",
    "refused",
    "released",
    "release_failed",
    "renewed",
    "renew_failed",
    "lapsed",
)


def one(request: RequestInfo) -> str:
    """Every request is the same identity: its slot is ``inflight:one``."""
    return "one"


def slots(registry: CollectorRegistry, rule: str = "inflight") -> dict[str, float]:
    """``ratewarden_slots_total`` of ``rule`` by outcome, those never counted left out."""
    found = {
        outcome: registry.get_sample_value(
            "ratewarden_slots_total", {"rule": rule, "outcome": outcome}
        )
        for outcome in OUTCOMES
    }
    return {outcome: value for outcome, value in found.items() if value}


def app_with(
    limiter: AsyncLimiter,
    metrics: PrometheusMetrics,
    between: Callable[[int], None] = lambda step: None,
    **options: Any,
) -> tuple[Starlette, asyncio.Event, asyncio.Event]:
    """``/`` answers at once; ``/wait`` holds its slot until ``go`` is set (``entered`` says it
    holds it); ``/stream`` sends three chunks, calling ``between(step)`` before the 2nd and
    3rd."""
    entered, go = asyncio.Event(), asyncio.Event()

    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def wait(request: Request) -> Response:
        entered.set()
        await go.wait()
        return PlainTextResponse("waited")

    async def chunks() -> AsyncIterator[bytes]:
        for step in range(3):
            if step:
                between(step)
            yield b"x"

    async def stream(request: Request) -> Response:
        return StreamingResponse(chunks())

    routes = [Route("/", ok), Route("/wait", wait), Route("/stream", stream)]
    app = Starlette(routes=routes)
    options = {"limit": 1, "key": one, "ttl": 30, **options}
    app.add_middleware(ConcurrencyMiddleware, limiter=limiter, metrics=metrics, **options)
    return app, entered, go


async def test_asgi_slots_acquired_refused_and_released_are_counted(async_store: Any) -> None:
    """Two requests one after the other take and give back a slot each; a third, while a
    fourth holds the only slot, is refused (429) and takes none."""
    registry = CollectorRegistry()
    app, entered, go = app_with(AsyncLimiter(async_store), PrometheusMetrics(registry))
    async with client_for(app) as client:
        assert [(await client.get("/")).status_code for _ in range(2)] == [200, 200]
        holder = asyncio.create_task(client.get("/wait"))
        await asyncio.wait_for(entered.wait(), 5)
        assert (await client.get("/")).status_code == 429
        go.set()
        assert (await holder).status_code == 200
    assert slots(registry) == {"acquired": 3, "refused": 1, "released": 3}


async def test_asgi_renewals_while_streaming_are_renewed_then_lapsed() -> None:
    """A stream renews its slot once a third of its TTL has passed (``renewed``); after more
    than a whole TTL with nothing sent, the renewal finds the slot gone (``lapsed``). The
    slot is given back at the stream's end all the same (``released``)."""
    clock = ManualClock()
    registry = CollectorRegistry()
    steps = {1: 2.0, 2: 4.0}  # within the TTL of 3, then past it
    app, _, _ = app_with(
        AsyncLimiter(AsyncMemoryStore(clock=clock)),
        PrometheusMetrics(registry),
        lambda step: clock.advance(steps[step]),
        ttl=3,
        clock=clock,
    )
    async with client_for(app) as client:
        assert (await client.get("/stream")).content == b"xxx"
    assert slots(registry) == {"acquired": 1, "renewed": 1, "lapsed": 1, "released": 1}


async def test_asgi_a_store_failing_mid_stream_counts_renew_and_release_failed(
    proxied_store: Proxied,
) -> None:
    """A real redis-server behind a proxy that resets every connection once the stream has
    begun: the renewal and the release fail (logged, the TTL frees the slot), counted as
    ``renew_failed`` and ``release_failed``; the response still ends. A request after it is
    answered by the failure mode: counted in ``ratewarden_degraded_total`` as before, not as a
    slot."""
    proxy, store = proxied_store()
    clock = ManualClock()
    registry = CollectorRegistry()

    def between(step: int) -> None:
        if step == 1:
            clock.advance(2.0)
            proxy.set_fault(Fault.RESET)

    app, _, _ = app_with(
        AsyncLimiter(store), PrometheusMetrics(registry), between, ttl=3, clock=clock
    )
    async with client_for(app) as client:
        assert (await client.get("/stream")).content == b"xxx"
        assert (await client.get("/")).status_code == 200  # open: the app runs, no slot
    assert slots(registry) == {"acquired": 1, "renew_failed": 1, "release_failed": 1}
    labels = {"rule": "inflight", "failure_mode": "open", "reason": "StorageUnavailableError"}
    assert registry.get_sample_value("ratewarden_degraded_total", labels) == 1


# --- Django -----------------------------------------------------------------------------------


def quick(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("quick", quick)]


def _django(limiter: Any, metrics: PrometheusMetrics) -> override_settings:
    return override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=["ratewarden.middleware.django_concurrency.DjangoConcurrencyMiddleware"],
        RATEWARDEN_CONCURRENCY={
            "limiter": limiter,
            "limit": 1,
            "key": one,
            "metrics": metrics,
        },
    )


@pytest.fixture(params=["memory", "redis"])
def limiter(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """A Limiter on memory or on a real redis-server (emptied first)."""
    if request.param == "memory":
        return Limiter(MemoryStore())
    redis_server.client().flushall()
    return Limiter(RedisStore.from_url(redis_server.url, timeout=2.0))


def test_django_sync_mode_counts_slots(limiter: Limiter) -> None:
    """Django's test client (sync mode): two requests take and give back a slot each; with
    the slot held elsewhere, a third is refused."""
    registry = CollectorRegistry()
    with _django(limiter, PrometheusMetrics(registry)):
        client = Client()
        assert [client.get("/quick").status_code for _ in range(2)] == [200, 200]
        lease = limiter.acquire_slot("inflight:one", 1, ttl=30)
        assert client.get("/quick").status_code == 429
        limiter.release_slot(lease)
    assert slots(registry) == {"acquired": 2, "refused": 1, "released": 2}


async def test_django_async_mode_counts_slots(async_store: Any) -> None:
    """Django's async test client (async mode, an AsyncLimiter): the same counts."""
    limiter = AsyncLimiter(async_store)
    registry = CollectorRegistry()
    with _django(limiter, PrometheusMetrics(registry)):
        client = AsyncClient()
        assert [(await client.get("/quick")).status_code for _ in range(2)] == [200, 200]
        lease = await limiter.acquire_slot("inflight:one", 1, ttl=30)
        assert (await client.get("/quick")).status_code == 429
        await limiter.release_slot(lease)
    assert slots(registry) == {"acquired": 2, "refused": 1, "released": 2}


def test_an_unknown_slot_outcome_is_refused() -> None:
    """``PrometheusMetrics.slot`` takes the outcomes of its fixed set only."""
    metrics = PrometheusMetrics(CollectorRegistry())
    with pytest.raises(ValueError, match="slot outcome must be one of"):
        metrics.slot(rule="inflight", outcome="taken")
