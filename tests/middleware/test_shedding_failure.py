"""The load shedding middlewares when they cannot decide, and when they are misconfigured.

A fleet shedder over a stopped redis-server (uvicorn and werkzeug over real sockets), and a
LoadShedder whose utilization cannot be read: ``failure_mode="open"`` (the default) runs the
app, ``"closed"`` answers 503 with ``Retry-After``; never a 500, and each such request is
counted in ``metrics.degraded`` under the middleware's name. Bad options are refused with a
ConfigurationError when the middleware is built.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder
from ratewarden.limiter import CircuitBreaker
from ratewarden.middleware import SheddingMiddleware, WSGISheddingMiddleware, class_from_header
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._metrics import Recorded
from tests._servers import STORE_TIMEOUT
from tests.middleware._shed_apps import (
    BOUND,
    Gates,
    asgi_serving,
    flask_app,
    starlette_app,
    wsgi_serving,
)

pytestmark = pytest.mark.timeout(60)

BATCH = {"x-priority": "batch"}


def _assert_503(response: httpx.Response) -> None:
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.headers["cache-control"] == "no-store"
    assert json.loads(response.content)["status"] == 503


@pytest.mark.redis
@pytest.mark.parametrize(("failure_mode", "status"), [("open", 200), ("closed", 503)])
def test_asgi_with_redis_stopped_answers_by_the_failure_mode(
    stopped: str, failure_mode: str, status: int
) -> None:
    """uvicorn, an AsyncFleetShedder on a stopped Redis: the app runs (open) or 503 (closed)."""
    store = AsyncRedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
    metrics = Recorded()
    shedder = AsyncFleetShedder(AsyncLimiter(store), "api", 10)
    app = starlette_app(shedder, Gates(), failure_mode=failure_mode, metrics=metrics)
    with asgi_serving(app, store) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        response = client.get("/quick", headers=BATCH)
    assert response.status_code == status
    if failure_mode == "open":
        assert response.text == "ok"
    else:
        _assert_503(response)
    assert metrics.degraded_calls == [("shed", failure_mode, "StorageUnavailableError")]


@pytest.mark.redis
@pytest.mark.parametrize(("failure_mode", "status"), [("open", 200), ("closed", 503)])
def test_wsgi_with_redis_stopped_answers_by_the_failure_mode(
    stopped: str, failure_mode: str, status: int
) -> None:
    """werkzeug and Flask, a FleetShedder on a stopped Redis: the view runs (open) or 503."""
    store = RedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
    metrics = Recorded()
    shedder = FleetShedder(Limiter(store), "api", 10)
    app = flask_app(shedder, Gates(), failure_mode=failure_mode, metrics=metrics, name="api")
    try:
        with wsgi_serving(app) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
            response = client.get("/quick", headers=BATCH)
    finally:
        store.close()
    assert response.status_code == status
    if failure_mode == "open":
        assert response.text == "ok"
    else:
        _assert_503(response)
    assert metrics.degraded_calls == [("api", failure_mode, "StorageUnavailableError")]


@pytest.mark.redis
def test_closed_with_the_limiters_breaker_open_waits_for_its_probe(stopped: str) -> None:
    """The limiter's breaker, open after two failures: the 503's Retry-After is its next probe
    (4.5 s cool-down, 1 s gone: 4), counted as ``breaker_open``."""
    clock = ManualClock()
    breaker = CircuitBreaker(failures=2, failure_ratio=None, cooldown=4.5, clock=clock)
    store = AsyncRedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
    metrics = Recorded()
    shedder = AsyncFleetShedder(AsyncLimiter(store, breaker=breaker), "api", 10)
    app = starlette_app(shedder, Gates(), failure_mode="closed", metrics=metrics)
    with asgi_serving(app, store) as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        first = [client.get("/quick", headers=BATCH) for _ in range(2)]
        clock.advance(1)
        response = client.get("/quick", headers=BATCH)
    assert [r.status_code for r in first] == [503, 503]
    assert (response.status_code, response.headers["retry-after"]) == (503, "4")
    assert [reason for _, _, reason in metrics.degraded_calls][-1] == "breaker_open"


def _broken() -> float:
    raise RuntimeError("the gauge is gone")


@pytest.mark.parametrize("flavour", ["asgi", "wsgi"])
@pytest.mark.parametrize(("failure_mode", "status"), [("open", 200), ("closed", 503)])
@pytest.mark.parametrize("gauge", [_broken, lambda: math.nan], ids=["raises", "nan"])
def test_a_utilization_that_cannot_be_read_answers_by_the_failure_mode(
    flavour: str,
    failure_mode: str,
    status: int,
    gauge: Callable[[], float],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A LoadShedder whose callable raises, or gives no number: the failure mode answers, the
    request is counted as degraded, and an error is logged once for two requests."""
    metrics = Recorded()
    options: dict[str, Any] = {"failure_mode": failure_mode, "metrics": metrics}
    make_app, serve = (
        (starlette_app, asgi_serving) if flavour == "asgi" else (flask_app, wsgi_serving)
    )
    app = make_app(LoadShedder(gauge), Gates(), **options)
    with (
        caplog.at_level(logging.ERROR, logger="ratewarden.middleware"),
        serve(app) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
    ):
        responses = [client.get("/quick", headers=BATCH) for _ in range(2)]
    assert [r.status_code for r in responses] == [status] * 2
    if failure_mode == "closed":
        _assert_503(responses[0])
    reason = "RuntimeError" if gauge is _broken else "ConfigurationError"
    assert metrics.degraded_calls == [("shed", failure_mode, reason)] * 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "the utilization could not be read" in lines[0]


def _asgi(**options: Any) -> SheddingMiddleware:
    options.setdefault("shedder", AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "a", 10))
    return SheddingMiddleware(lambda scope, receive, send: None, **options)  # type: ignore[arg-type, return-value]


def _wsgi(**options: Any) -> WSGISheddingMiddleware:
    options.setdefault("shedder", FleetShedder(Limiter(MemoryStore()), "a", 10))
    return WSGISheddingMiddleware(lambda environ, start_response: [b""], **options)


@pytest.mark.parametrize(
    ("build", "options", "message"),
    [
        (_asgi, {"shedder": FleetShedder(Limiter(), "a", 10)}, "an AsyncFleetShedder"),
        (_wsgi, {"shedder": AsyncFleetShedder(AsyncLimiter(), "a", 10)}, "a FleetShedder"),
        (_wsgi, {"shedder": Limiter()}, "or a LoadShedder"),
        (_wsgi, {"default": "urgent"}, "default class 'urgent' is not a class"),
        (_wsgi, {"classify": class_from_header(default="urgent")}, "'urgent' is not a class"),
        (
            _wsgi,
            {"classify": class_from_header(default="batch"), "default": "test"},
            "two defaults",
        ),
        (_wsgi, {"classify": "x-priority"}, "classify='x-priority'"),
        (_wsgi, {"status": 500}, "status=500"),
        (_wsgi, {"retry_after": -1}, "retry_after=-1"),
        (_wsgi, {"name": "a b"}, "rule name"),
        (_wsgi, {"paths": "health"}, "path pattern"),
        (_wsgi, {"methods": "GET POST"}, "not a method name"),
        (_wsgi, {"failure_mode": "local"}, "TwoTier"),
        (_wsgi, {"failure_mode": "maybe"}, "failure_mode 'maybe'"),
        (_wsgi, {"metrics": object()}, "must be a Metrics"),
        (_asgi, {"status": 200}, "status=200"),
    ],
)
def test_bad_options_are_refused_when_the_middleware_is_built(
    build: Callable[..., object], options: dict[str, Any], message: str
) -> None:
    """Each bad option is a ConfigurationError naming it, before any request is served."""
    with pytest.raises(ConfigurationError, match=message):
        build(**options)


def test_class_from_header_needs_a_header_name() -> None:
    """An empty header name is refused."""
    with pytest.raises(ConfigurationError, match="header name"):
        class_from_header(" ")
