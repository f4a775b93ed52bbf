"""The Idempotency-Key middlewares count what they did with each request they handled:
``Metrics.idempotency_request``, recorded by ``PrometheusMetrics`` as
``ratewarden_idempotency_requests_total{rule, outcome}``.

Outcomes: ``ran`` (the first request with its key), ``replayed``, ``in_flight`` (409),
``mismatched`` (422), ``bad_key`` and ``key_missing`` (400), ``too_large`` (413),
``client_gone`` (the body was cut short: nothing ran), ``store_failed`` (503) and
``unguarded`` (``fail_open``). Requests the middleware does not
handle (a GET, a POST without a key where none is required) are not counted. Driven through
Starlette (httpx in process), Flask (werkzeug's client) and Django's WSGI handler, on memory
and on a real redis-server; each test reads the exact counts from a fresh registry.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aredis
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, JsonResponse
from django.test.utils import override_settings
from django.urls import path
from prometheus_client import CollectorRegistry
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from werkzeug.test import Client

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden.errors import ConfigurationError
from ratewarden.idempotency import AsyncIdempotencyStore
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from tests._servers import RedisServer, free_port
from tests.idempotency._apps import Orders, flask_orders, starlette_orders
from tests.idempotency.conftest import unique_prefix

pytestmark = pytest.mark.timeout(60)

OUTCOMES = (
    "ran",
    "replayed",
    "in_flight",
    "mismatched",
    "bad_key",
    "key_missing",
    "too_large",
    "client_gone",
    "store_failed",
    "unguarded",
)


def counted(registry: CollectorRegistry, rule: str = "idempotency") -> dict[str, float]:
    """``ratewarden_idempotency_requests_total`` of ``rule`` by outcome, those never counted
    left out."""
    found = {
        outcome: registry.get_sample_value(
            "ratewarden_idempotency_requests_total", {"rule": rule, "outcome": outcome}
        )
        for outcome in OUTCOMES
    }
    return {outcome: value for outcome, value in found.items() if value}


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


@pytest.fixture(params=["memory", "redis"])
async def async_store(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[AsyncIdempotencyStore]:
    """An async idempotency store: memory, or a real redis-server."""
    if request.param == "memory":
        yield AsyncMemoryIdempotencyStore()
        return
    client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
    yield AsyncRedisIdempotencyStore(client, prefix=unique_prefix())
    await client.aclose()


async def test_asgi_counts_each_outcome_of_a_handled_request(
    async_store: AsyncIdempotencyStore,
) -> None:
    """One request of each outcome a working store gives, and two the middleware does not
    handle (a GET with a key, a POST without one where none is required)."""
    registry = CollectorRegistry()
    app = IdempotencyMiddleware(
        starlette_orders(Orders()),
        async_store,
        metrics=PrometheusMetrics(registry),
        required="/orders/required",
        max_body_bytes=10,
    )
    held = app.policy.pending("POST", "/orders/held", None, "k-held", b"", b"{}")
    await async_store.begin(held.record, held.fingerprint, uuid.uuid4().hex, 60.0)
    async with client_for(app) as client:
        statuses = [
            (await client.post("/orders/a", content=b"{}", headers=key("k1"))).status_code,
            (await client.post("/orders/a", content=b"{}", headers=key("k1"))).status_code,
            (await client.post("/orders/a", content=b"[]", headers=key("k1"))).status_code,
            (await client.post("/orders/a", content=b"{}", headers=key("a,b"))).status_code,
            (await client.post("/orders/required", content=b"{}")).status_code,
            (await client.post("/orders/a", content=b"x" * 11, headers=key("k2"))).status_code,
            (await client.post("/orders/held", content=b"{}", headers=key("k-held"))).status_code,
            (await client.get("/orders/a", headers=key("k3"))).status_code,
            (await client.post("/orders/b", content=b"{}")).status_code,
        ]
    assert statuses == [201, 201, 422, 400, 400, 413, 409, 201, 201]
    assert counted(registry) == {
        "ran": 1,
        "replayed": 1,
        "mismatched": 1,
        "bad_key": 1,
        "key_missing": 1,
        "too_large": 1,
        "in_flight": 1,
    }


def unreachable_store() -> AsyncRedisIdempotencyStore:
    """A Redis store on a port nobody listens on: ``begin`` fails at once."""
    client = aredis.Redis(
        port=free_port(), socket_connect_timeout=0.2, retry=AsyncRetry(NoBackoff(), 0)
    )
    return AsyncRedisIdempotencyStore(client)


@pytest.mark.parametrize(
    ("fail_open", "status", "outcome"), [(False, 503, "store_failed"), (True, 201, "unguarded")]
)
async def test_asgi_a_store_failing_at_begin_is_counted(
    fail_open: bool, status: int, outcome: str
) -> None:
    """The store unreachable: 503 (``store_failed``), or the app run without the guarantee
    (``unguarded``, ``fail_open``); counted under the middleware's ``name``."""
    registry = CollectorRegistry()
    app = IdempotencyMiddleware(
        starlette_orders(Orders()),
        unreachable_store(),
        fail_open=fail_open,
        name="payments",
        metrics=PrometheusMetrics(registry),
    )
    async with client_for(app) as client:
        response = await client.post("/orders/a", content=b"{}", headers=key("k"))
    assert response.status_code == status
    assert counted(registry, "payments") == {outcome: 1}
    assert counted(registry) == {}


@pytest.fixture(params=["memory", "redis"])
def sync_store(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """A blocking idempotency store: memory, or a real redis-server."""
    if request.param == "memory":
        return MemoryIdempotencyStore()
    return RedisIdempotencyStore(redis_server.client(), prefix=unique_prefix())


def test_wsgi_flask_counts_ran_replayed_mismatched_and_too_large(sync_store: Any) -> None:
    """The WSGI middleware around Flask counts as the ASGI one does."""
    registry = CollectorRegistry()
    app = WSGIIdempotencyMiddleware(
        flask_orders(Orders()), sync_store, metrics=PrometheusMetrics(registry), max_body_bytes=10
    )
    client = Client(app)
    statuses = [
        client.post("/orders/a", data=b"{}", headers=key("k1")).status_code,
        client.post("/orders/a", data=b"{}", headers=key("k1")).status_code,
        client.post("/orders/a", data=b"[]", headers=key("k1")).status_code,
        client.post("/orders/a", data=b"x" * 11, headers=key("k2")).status_code,
    ]
    assert statuses == [201, 201, 422, 413]
    assert counted(registry) == {"ran": 1, "replayed": 1, "mismatched": 1, "too_large": 1}


def pay(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"paid": request.body.decode()}, status=201)


urlpatterns = [path("pay", pay)]


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])
def test_wsgi_around_django_counts_ran_and_replayed() -> None:
    """The WSGI middleware around Django's own WSGI handler: a payment and its retry."""
    registry = CollectorRegistry()
    app = WSGIIdempotencyMiddleware(
        WSGIHandler(), MemoryIdempotencyStore(), metrics=PrometheusMetrics(registry)
    )
    client = Client(app)
    sent = [client.post("/pay", data=b"{}", headers=key("p1")) for _ in range(2)]
    assert [response.status_code for response in sent] == [201, 201]
    assert sent[1].headers["Idempotent-Replayed"] == "true"
    assert counted(registry) == {"ran": 1, "replayed": 1}


@pytest.mark.parametrize("metrics", [object(), PrometheusMetrics, "prometheus"])
def test_metrics_that_are_not_metrics_are_refused(metrics: object) -> None:
    """``metrics=`` is checked as the other middlewares' is: a Metrics instance (or an object
    with ``idempotency_request``), else a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match=r"idempotency middleware: metrics .* must be"):
        IdempotencyMiddleware(
            starlette_orders(Orders()), AsyncMemoryIdempotencyStore(), metrics=metrics
        )


def test_an_unknown_idempotency_outcome_is_refused() -> None:
    """``PrometheusMetrics.idempotency_request`` takes the outcomes of its fixed set only."""
    metrics = PrometheusMetrics(CollectorRegistry())
    with pytest.raises(ValueError, match="idempotency request outcome must be one of"):
        metrics.idempotency_request(rule="idempotency", outcome="conflict")
