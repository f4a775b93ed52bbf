"""What the load shedding middlewares count: each request a shedder admitted or shed, by the
middleware's name and the request's traffic class, read from a Prometheus registry.

Through real servers over real sockets: Starlette on uvicorn (an AsyncFleetShedder on memory
and on a real redis-server, and a LoadShedder), Flask on werkzeug's threaded server (a
FleetShedder on memory and on Redis), and Django's WSGI handler behind the WSGI middleware. A
request the failure mode answered was not decided by the shedder: it is counted in
``ratewarden_degraded_total`` only.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.conf import settings
from prometheus_client import CollectorRegistry

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder
from ratewarden.metrics import Metrics, PrometheusMetrics
from ratewarden.middleware import WSGISheddingMiddleware, class_from_header
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._django import configure_django
from tests._servers import STORE_TIMEOUT, RedisServer
from tests.middleware._shed_apps import (
    BOUND,
    SMALL,
    Gates,
    asgi_serving,
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

SHED = "ratewarden_shed_decisions_total"
#: One stream of critical held, two batch requests, one critical: what the counter then holds.
HELD_ONE = {("shed", "critical", "admitted"): 2.0, ("shed", "batch", "shed"): 2.0}


def shed_counts(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """Every sample of the shed decisions counter: (rule, traffic_class, outcome) -> count."""
    return {
        (s.labels["rule"], s.labels["traffic_class"], s.labels["outcome"]): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name == SHED
    }


@pytest.fixture(params=["memory", "redis"])
def async_store(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """An asyncio store: memory, or a real redis-server (emptied first); the app's server
    closes it on its own loop."""
    if request.param == "memory":
        return AsyncMemoryStore()
    redis_server.client().flushall()
    return AsyncRedisStore.from_url(redis_server.url, timeout=2.0)


def _one_held(url: str, gates: Gates) -> list[int]:
    """One critical stream held (1 slot of 2): two batch requests, then one critical."""
    with httpx.Client(base_url=url, timeout=BOUND) as client, held(client, 1):
        codes = [status_of(client, c) for c in ("batch", "batch", "critical")]
        gates.finish.open()
    return codes


def test_asgi_counts_each_request_admitted_and_shed_by_class(async_store: Any) -> None:
    """uvicorn, an AsyncFleetShedder of capacity 2 (batch may take 1 slot): with one stream
    held, the two batch requests are counted shed and the critical ones (the stream and a
    quick request) admitted; nothing else is counted."""
    registry = CollectorRegistry()
    gates = Gates()
    shedder = AsyncFleetShedder(AsyncLimiter(async_store), "api", 2, policy=SMALL)
    app = starlette_app(shedder, gates, metrics=PrometheusMetrics(registry))
    with asgi_serving(app, async_store) as url:
        codes = _one_held(url, gates)
    assert codes == [503, 503, 200]
    assert shed_counts(registry) == HELD_ONE


def test_wsgi_counts_each_request_admitted_and_shed_by_class(sync_limiter: Limiter) -> None:
    """Flask on werkzeug, a FleetShedder of capacity 2 on memory or Redis: the same counts as
    the ASGI middleware's."""
    registry = CollectorRegistry()
    gates = Gates()
    shedder = FleetShedder(sync_limiter, "api", 2, policy=SMALL)
    app = flask_app(shedder, gates, metrics=PrometheusMetrics(registry))
    with wsgi_serving(app) as url:
        codes = _one_held(url, gates)
    assert codes == [503, 503, 200]
    assert shed_counts(registry) == HELD_ONE


def test_a_load_shedder_s_answers_are_counted_under_the_middleware_s_name() -> None:
    """uvicorn, a LoadShedder at 0.7 and ``name="gpu"``: normal and critical admitted, batch and
    test shed, each under rule ``gpu``; a path that is not selected is not counted."""
    registry = CollectorRegistry()
    app = starlette_app(
        LoadShedder(lambda: 0.7),
        Gates(),
        name="gpu",
        paths=["/quick"],
        metrics=PrometheusMetrics(registry),
    )
    with asgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        codes = [status_of(client, c) for c in ("critical", "normal", "batch", "test", "test")]
        health = status_of(client, "test", "/health")
    assert (codes, health) == ([200, 200, 503, 503, 503], 200)
    assert shed_counts(registry) == {
        ("gpu", "critical", "admitted"): 1.0,
        ("gpu", "normal", "admitted"): 1.0,
        ("gpu", "batch", "shed"): 1.0,
        ("gpu", "test", "shed"): 2.0,
    }


@pytest.mark.redis
@pytest.mark.parametrize("failure_mode", ["open", "closed"])
def test_a_request_the_failure_mode_answered_is_counted_degraded_not_shed(
    stopped: str, failure_mode: str
) -> None:
    """werkzeug, a FleetShedder on a stopped Redis: the shedder decided nothing, so the counter
    of its decisions stays empty and ``ratewarden_degraded_total`` has the request."""
    registry = CollectorRegistry()
    store = RedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
    app = flask_app(
        FleetShedder(Limiter(store), "api", 10),
        Gates(),
        failure_mode=failure_mode,
        metrics=PrometheusMetrics(registry),
    )
    try:
        with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
            status = status_of(client, "batch")
    finally:
        store.close()
    assert status == (200 if failure_mode == "open" else 503)
    assert shed_counts(registry) == {}
    degraded = registry.get_sample_value(
        "ratewarden_degraded_total",
        {"rule": "shed", "failure_mode": failure_mode, "reason": "StorageUnavailableError"},
    )
    assert degraded == 1.0


def django_report(request: HttpRequest) -> HttpResponse:
    return HttpResponse("report")


urlpatterns = [path("report", django_report)]


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])
def test_django_s_wsgi_handler_behind_the_middleware_counts_its_requests() -> None:
    """Django's WSGIHandler wrapped and served by werkzeug, at utilization 0.7: the batch
    request shed before Django and the normal one that reached the view are both counted."""
    registry = CollectorRegistry()
    app = WSGISheddingMiddleware(
        WSGIHandler(),
        shedder=LoadShedder(lambda: 0.7),
        classify=class_from_header(),
        metrics=PrometheusMetrics(registry),
    )
    with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        codes = [status_of(client, c, "/report") for c in ("batch", "normal")]
    assert codes == [503, 200]
    assert shed_counts(registry) == {
        ("shed", "batch", "shed"): 1.0,
        ("shed", "normal", "admitted"): 1.0,
    }


def test_the_base_metrics_hook_does_nothing_and_a_subclass_sees_each_call() -> None:
    """``Metrics.shed_decision`` is a no-op, as the other hooks are; a subclass of one's own
    gets rule, class and whether the request was admitted."""
    assert Metrics().shed_decision(rule="shed", traffic_class="batch", admitted=False) is None
    seen: list[tuple[str, str, bool]] = []

    class Mine(Metrics):
        def shed_decision(self, *, rule: str, traffic_class: str, admitted: bool) -> None:
            seen.append((rule, traffic_class, admitted))

    app = WSGISheddingMiddleware(
        lambda environ, start: [b"ok"], shedder=LoadShedder(lambda: 0.7), metrics=Mine()
    )
    app({"REQUEST_METHOD": "GET", "PATH_INFO": "/"}, lambda *args: None)
    assert seen == [("shed", "normal", True)]
