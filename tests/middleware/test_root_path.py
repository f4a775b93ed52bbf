"""Path patterns match the path the app routes, also when it is served under a root path.

ASGI's ``path`` includes ``root_path`` (uvicorn's ``--root-path``, a Starlette ``Mount``);
Starlette's routing strips it, and so must every path matcher of the middlewares: rules,
the concurrency, token budget and load shedding middlewares' ``paths`` and the idempotency
middleware's ``required``. On WSGI the same patterns see ``PATH_INFO``, which excludes
``SCRIPT_NAME``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from werkzeug.test import Client as WerkzeugClient

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, LoadShedder, Usage
from ratewarden.middleware import (
    ConcurrencyMiddleware,
    RateLimitMiddleware,
    RequestInfo,
    Rule,
    RuleSet,
    SheddingMiddleware,
    TokenBudgetMiddleware,
    WSGIRateLimitMiddleware,
)
from ratewarden.middleware._request import from_asgi
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore
from ratewarden.testing import ManualClock
from tests.middleware._helpers import http_scope
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)


async def answer(request: Request) -> Response:
    if request.url.path.endswith("/inflight") and "x-inner" not in request.headers:
        # A second request for the same path while this one holds the only slot.
        server = request.scope["server"]
        async with httpx.AsyncClient(timeout=5) as client:
            inner = await client.get(
                f"http://{server[0]}:{server[1]}/inflight", headers={"x-inner": "1"}
            )
        return PlainTextResponse(str(inner.status_code))
    return PlainTextResponse("ran", status_code=201 if request.method == "POST" else 200)


def _estimate(request: RequestInfo, body: bytes) -> Usage:
    return Usage.of()


def _app(clock: ManualClock) -> Starlette:
    """Each middleware selects a path of its own; the routes are the app's, without /api."""
    paths = ("/orders", "/payments", "/shed", "/budget", "/inflight")
    app = Starlette(routes=[Route(p, answer, methods=["GET", "POST"]) for p in paths])
    rules = RuleSet([Rule("orders", "1/minute", paths=["/orders"])], clock=clock)
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=rules)
    app.add_middleware(
        IdempotencyMiddleware, store=AsyncMemoryIdempotencyStore(), required=["/payments"]
    )
    app.add_middleware(SheddingMiddleware, shedder=LoadShedder(lambda: 1.0), paths=["/shed"])
    budget = AsyncTokenBudget(
        AsyncMemoryStore(clock=clock), {"requests": "1/minute"}, max_output_tokens=1
    )
    app.add_middleware(TokenBudgetMiddleware, budget=budget, estimate=_estimate, paths="/budget")
    slots = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(
        ConcurrencyMiddleware, limiter=slots, limit=1, paths=["/inflight"], clock=clock
    )
    return app


@pytest.fixture
def under_api() -> Iterator[httpx.Client]:
    """The app on uvicorn with ``--root-path /api``: a proxy took ``/api`` off the path."""
    with (
        serving(_app(ManualClock(1_700_000_000.0)), root_path="/api") as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        yield client


def _flask_under_api() -> list[int]:
    """Three requests for ``/api/orders`` to a Flask app mounted at ``/api`` (``SCRIPT_NAME``)
    with the same rule."""
    clock = ManualClock(1_700_000_000.0)
    app = Flask(__name__)
    app.add_url_rule("/orders", "orders", lambda: "ran")
    rules = RuleSet([Rule("orders", "1/minute", paths=["/orders"])], clock=clock)
    limiter = Limiter(MemoryStore(clock=clock))
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=rules)  # type: ignore[method-assign]
    client = WerkzeugClient(app)
    mounted = {"SCRIPT_NAME": "/api"}
    return [client.get("/orders", environ_overrides=mounted).status_code for _ in range(3)]


def test_a_rules_paths_match_under_uvicorns_root_path(under_api: httpx.Client) -> None:
    """``Rule(paths=["/orders"])`` of 1/minute: the second and third requests are refused,
    as they are by the same rule on WSGI, where the pattern sees ``PATH_INFO``."""
    codes = [under_api.get("/orders").status_code for _ in range(3)]
    assert codes == _flask_under_api() == [200, 429, 429]


def test_idempotency_required_matches_under_uvicorns_root_path(under_api: httpx.Client) -> None:
    """``required=["/payments"]``: a POST without a key is answered 400 and never runs."""
    refused = under_api.post("/payments")
    assert refused.status_code == 400
    assert "/payments" in refused.json()["detail"]
    assert under_api.post("/payments", headers={"idempotency-key": "k1"}).status_code == 201


def test_shedding_budget_and_concurrency_paths_match_under_uvicorns_root_path(
    under_api: httpx.Client,
) -> None:
    """Shedding at full load refuses ``/shed``; a budget of 1 request a minute refuses the
    second ``/budget``; one slot refuses a second ``/inflight`` while the first is in it."""
    assert under_api.get("/shed").status_code == 503
    assert [under_api.get("/budget").status_code for _ in range(2)] == [200, 429]
    held = under_api.get("/inflight")
    assert (held.status_code, held.text) == (200, "429")


def _scope(path: str, root_path: str) -> dict[str, Any]:
    scope = http_scope("GET", path, [], client=("198.51.100.4", 1), server=("t", 80))
    scope["root_path"] = root_path
    return scope


def test_the_root_path_comes_off_at_a_segment_boundary_as_starlettes_routing_does() -> None:
    """``/api/orders`` under ``/api`` is ``/orders``; the mount point itself is ``/``; a path
    that only shares the prefix's letters (``/apiv2``), or lies outside it, keeps them."""
    seen = {
        (path, root): from_asgi(_scope(path, root)).path
        for path, root in [
            ("/api/orders", "/api"),
            ("/api", "/api"),
            ("/apiv2/orders", "/api"),
            ("/other", "/api"),
            ("/orders", ""),
        ]
    }
    assert seen == {
        ("/api/orders", "/api"): "/orders",
        ("/api", "/api"): "/",
        ("/apiv2/orders", "/api"): "/apiv2/orders",
        ("/other", "/api"): "/other",
        ("/orders", ""): "/orders",
    }
