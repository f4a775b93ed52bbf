"""The token budget middlewares count their reservations: ``Metrics.budget_reservation``,
recorded by ``PrometheusMetrics`` as ``ratewarden_budget_reservations_total{rule, outcome}``
and their tokens as ``ratewarden_budget_tokens_total{rule, stage}``.

A request granted is ``reserved`` (its estimate's tokens) and, once it is over, ``settled``
(the tokens it used, the estimate when nothing says); a request over the budget is
``refused``; the store failing at the settlement is ``settle_failed``, and a reservation whose
record was gone by then ``expired``. Driven through Starlette (httpx in process) and Django's
test client (sync and async mode), on memory and on a real redis-server; each test reads the
exact counts from a fresh registry.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client
from django.test.utils import override_settings
from django.urls import path
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden.budgets import AsyncTokenBudget, TokenBudget, Usage
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware import RequestInfo, TokenBudgetMiddleware
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer
from tests.faults._proxy import Fault
from tests.middleware._helpers import client_for
from tests.middleware.conftest import Proxied

pytestmark = pytest.mark.timeout(60)

LIMITS = {"requests": "100/minute", "tokens": "1000/minute"}
OUTCOMES = ("reserved", "refused", "settled", "settle_failed", "expired")


def estimate(request: RequestInfo, body: bytes) -> Usage:
    """``x-input`` input tokens (100 unless given) and 50 output tokens."""
    return Usage.of(int(request.headers.get("x-input", "100")), 50)


def counted(registry: CollectorRegistry, rule: str = "budget") -> dict[str, float]:
    """The reservations of ``rule`` by outcome and their tokens by stage (``tokens:<stage>``),
    those never counted left out."""
    found = {
        outcome: registry.get_sample_value(
            "ratewarden_budget_reservations_total", {"rule": rule, "outcome": outcome}
        )
        for outcome in OUTCOMES
    }
    for stage in ("reserved", "settled"):
        found[f"tokens:{stage}"] = registry.get_sample_value(
            "ratewarden_budget_tokens_total", {"rule": rule, "stage": stage}
        )
    return {name: value for name, value in found.items() if value}


def budget_app(budget: AsyncTokenBudget, metrics: PrometheusMetrics, during: Any = None) -> Any:
    """``/used`` reports 30 tokens used in ``x-tokens-used``; ``/silent`` reports nothing (the
    estimate stands). ``during()`` runs in the endpoint, before its response starts."""

    async def used(request: Request) -> Response:
        if during is not None:
            during()
        return PlainTextResponse("ok", headers={"x-tokens-used": "30"})

    async def silent(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/used", used), Route("/silent", silent)])
    app.add_middleware(TokenBudgetMiddleware, budget=budget, estimate=estimate, metrics=metrics)
    return app


async def test_asgi_reserved_refused_and_settled_are_counted_with_their_tokens(
    async_store: Any,
) -> None:
    """Two granted requests reserve 150 tokens each and settle 30 (reported) and 150 (the
    estimate); one asking 1050 tokens of a 1000-token budget is refused: 300 tokens
    reserved, 180 settled."""
    registry = CollectorRegistry()
    budget = AsyncTokenBudget(async_store, LIMITS, max_output_tokens=50)
    async with client_for(budget_app(budget, PrometheusMetrics(registry))) as client:
        assert (await client.get("/used")).status_code == 200
        assert (await client.get("/silent")).status_code == 200
        assert (await client.get("/used", headers={"x-input": "1000"})).status_code == 429
    assert counted(registry) == {
        "reserved": 2,
        "refused": 1,
        "settled": 2,
        "tokens:reserved": 300,
        "tokens:settled": 180,
    }


async def test_asgi_a_store_failing_before_the_settlement_counts_settle_failed(
    proxied_store: Proxied,
) -> None:
    """A real redis-server behind a proxy that resets every connection while the app runs:
    the reservation was made, its settlement fails (the reservation keeps its charge)."""
    proxy, store = proxied_store()
    registry = CollectorRegistry()
    budget = AsyncTokenBudget(store, LIMITS, max_output_tokens=50)
    app = budget_app(budget, PrometheusMetrics(registry), lambda: proxy.set_fault(Fault.RESET))
    async with client_for(app) as client:
        assert (await client.get("/used")).status_code == 200
    assert counted(registry) == {"reserved": 1, "settle_failed": 1, "tokens:reserved": 150}


async def test_asgi_a_reservation_gone_before_its_settlement_is_expired(
    redis_server: RedisServer,
) -> None:
    """A real redis-server emptied while the app runs: the settlement finds no reservation
    (nothing settled), counted as ``expired``."""
    redis_server.client().flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=2.0)
    registry = CollectorRegistry()
    budget = AsyncTokenBudget(store, LIMITS, max_output_tokens=50)
    flush = redis.Redis(port=redis_server.port).flushall
    try:
        async with client_for(budget_app(budget, PrometheusMetrics(registry), flush)) as client:
            assert (await client.get("/used")).status_code == 200
    finally:
        await store.aclose()
    assert counted(registry) == {"reserved": 1, "expired": 1, "tokens:reserved": 150}


# --- Django -----------------------------------------------------------------------------------


def used(request: HttpRequest) -> HttpResponse:
    response = HttpResponse("ok")
    response["x-tokens-used"] = "30"
    return response


urlpatterns = [path("used", used)]


def _django(budget: Any, metrics: PrometheusMetrics) -> override_settings:
    return override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=["ratewarden.middleware.django_budget.DjangoTokenBudgetMiddleware"],
        RATEWARDEN_TOKEN_BUDGET={"budget": budget, "estimate": estimate, "metrics": metrics},
    )


@pytest.fixture(params=["memory", "redis"])
def sync_store(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """A blocking store: memory, or a real redis-server (emptied first)."""
    if request.param == "memory":
        return MemoryStore()
    redis_server.client().flushall()
    return RedisStore.from_url(redis_server.url, timeout=2.0)


EXPECTED = {
    "reserved": 2,
    "refused": 1,
    "settled": 2,
    "tokens:reserved": 300,
    "tokens:settled": 60,
}


def test_django_sync_mode_counts_reservations(sync_store: Any) -> None:
    """Django's test client (sync mode, a TokenBudget): two granted, one refused."""
    registry = CollectorRegistry()
    budget = TokenBudget(sync_store, LIMITS, max_output_tokens=50)
    with _django(budget, PrometheusMetrics(registry)):
        client = Client()
        assert [client.get("/used").status_code for _ in range(2)] == [200, 200]
        assert client.get("/used", headers={"x-input": "1000"}).status_code == 429
    assert counted(registry) == EXPECTED


async def test_django_async_mode_counts_reservations(async_store: Any) -> None:
    """Django's async test client (async mode, an AsyncTokenBudget): the same counts."""
    registry = CollectorRegistry()
    budget = AsyncTokenBudget(async_store, LIMITS, max_output_tokens=50)
    with _django(budget, PrometheusMetrics(registry)):
        client = AsyncClient()
        assert [(await client.get("/used")).status_code for _ in range(2)] == [200, 200]
        assert (await client.get("/used", headers={"x-input": "1000"})).status_code == 429
    assert counted(registry) == EXPECTED


def test_unknown_budget_outcomes_are_refused() -> None:
    """``PrometheusMetrics.budget_reservation`` takes the outcomes of its fixed set only."""
    metrics = PrometheusMetrics(CollectorRegistry())
    with pytest.raises(ValueError, match="budget reservation outcome must be one of"):
        metrics.budget_reservation(rule="budget", outcome="charged", tokens=1)
