"""The ASGI middleware in real Starlette and FastAPI apps, in process."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    by_api_key,
    exempt,
    limit,
    override,
)
from ratewarden.testing import ManualClock
from tests.middleware._helpers import peer_client
from tests.middleware._sfv import parse_list


@limit("2/minute", name="login")
async def login(request: Request) -> Response:
    return PlainTextResponse("welcome")


@exempt()
async def health(request: Request) -> Response:
    return PlainTextResponse("ok")


@override("per-ip", cost=4)
async def report(request: Request) -> Response:
    return PlainTextResponse("report")


async def home(request: Request) -> Response:
    return PlainTextResponse("home", headers={"x-app": "1"})


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()


def _starlette(ruleset: RuleSet, clock: ManualClock, events: list[str] | None = None) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if events is not None:
            events.append("startup")
        yield

    app = Starlette(
        routes=[
            Route("/", home, methods=["GET", "POST"]),
            Route("/login", login),
            Route("/health", health),
            Mount("/admin", routes=[Route("/report", report)]),
            WebSocketRoute("/ws", echo),
        ],
        lifespan=lifespan,
    )
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=ruleset)
    return app


async def test_allowed_responses_carry_headers_next_to_the_apps_own() -> None:
    """An allowed response keeps the app's headers and gains RateLimit-Policy and RateLimit."""
    clock = ManualClock()
    app = _starlette(RuleSet([Rule("per-ip", "10/minute")], clock=clock), clock)
    async with peer_client(app) as client:
        response = await client.get("/")
    assert response.status_code == 200 and response.text == "home"
    assert response.headers["x-app"] == "1"
    assert parse_list(response.headers["ratelimit-policy"])[0].params == {"q": 10, "w": 60}
    assert parse_list(response.headers["ratelimit"])[0].params == {"r": 9, "t": 6}


async def test_denied_request_gets_429_problem_json_and_never_reaches_the_app() -> None:
    """Over the limit: 429, Retry-After, no-store, problem+json; the endpoint is not called."""
    clock = ManualClock()
    headers = HeaderOptions(legacy=True, github=True, reset="epoch")
    app = _starlette(RuleSet([Rule("per-ip", "2/minute")], clock=clock, headers=headers), clock)
    async with peer_client(app) as client:
        for _ in range(2):
            assert (await client.get("/")).status_code == 200
        clock.advance(5)
        response = await client.get("/")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "25"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-ratelimit-reset"] == str(int(clock.now()) + 55)
    assert response.headers["x-ratelimit-used"] == "2"
    assert "x-app" not in response.headers
    assert json.loads(response.content)["status"] == 429


async def test_route_decorators_on_starlette_endpoints_including_mounts() -> None:
    """@exempt skips all rules, @limit adds one, @override changes the cost inside a Mount."""
    clock = ManualClock()
    app = _starlette(RuleSet([Rule("per-ip", "6/minute")], clock=clock), clock)
    async with peer_client(app) as client:
        for _ in range(5):
            health_response = await client.get("/health")
            assert health_response.status_code == 200
        assert "ratelimit" not in health_response.headers
        assert (await client.get("/login")).status_code == 200
        assert (await client.get("/login")).status_code == 200
        third = await client.get("/login")
        assert third.status_code == 429 and '"login"' in third.headers["ratelimit"]
        # per-ip used 3 of 6; a report costs 4.
        assert (await client.get("/admin/report")).status_code == 429


async def test_websocket_and_lifespan_pass_through_untouched() -> None:
    """Non-HTTP scopes never reach the limiter, even when HTTP is over its limit."""
    clock = ManualClock()
    events: list[str] = []
    app = _starlette(RuleSet([Rule("per-ip", "1/hour")], clock=clock), clock, events)
    with TestClient(app) as client:
        assert events == ["startup"]
        assert client.get("/").status_code == 200
        assert client.get("/").status_code == 429
        for _ in range(3):
            with client.websocket_connect("/ws") as ws:
                ws.send_text("hi")
                assert ws.receive_text() == "hi"


async def test_fastapi_path_operations_with_costs_and_layering() -> None:
    """FastAPI: reads cost 1 and writes 5 on the contract; a decorated path opts out."""
    clock = ManualClock()
    api = FastAPI()

    @api.get("/items")
    async def read_items() -> dict[str, str]:
        return {"items": "all"}

    @api.post("/items")
    async def create_item() -> dict[str, str]:
        return {"created": "yes"}

    @exempt("contract")
    @api.get("/status")
    async def status() -> dict[str, str]:
        return {"status": "fine"}

    ruleset = RuleSet(
        [
            Rule("per-ip", "100/minute"),
            Rule("contract", "10/minute", key=by_api_key(), cost={"GET": 1, "POST": 5}),
        ],
        clock=clock,
    )
    api.add_middleware(
        RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)), rules=ruleset
    )
    key = {"x-api-key": "team-a"}
    async with peer_client(api) as client:
        assert (await client.post("/items", headers=key)).status_code == 200
        read = await client.get("/items", headers=key)
        assert read.json() == {"items": "all"}
        assert parse_list(read.headers["ratelimit"])[0].params["r"] == 4
        assert (await client.post("/items", headers=key)).status_code == 429
        status_response = await client.get("/status", headers=key)
        assert status_response.status_code == 200
        assert parse_list(status_response.headers["ratelimit"])[0].value == "per-ip"
        assert (await client.get("/items", headers={"x-api-key": "team-b"})).status_code == 200


def test_middleware_refuses_bad_arguments() -> None:
    """The rules must be a RuleSet and the limiter must have hit()."""
    with pytest.raises(ConfigurationError, match="RuleSet"):
        RateLimitMiddleware(home, limiter=AsyncLimiter(), rules=[Rule("a", "1/s")])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="hit"):
        RateLimitMiddleware(home, limiter=object(), rules=RuleSet([]))  # type: ignore[arg-type]


async def test_routes_added_after_the_first_request_are_still_resolved() -> None:
    """The 'no decorated route' shortcut is re-checked when the routing table grows."""
    clock = ManualClock()
    app = Starlette(routes=[Route("/", home)])
    app.add_middleware(
        RateLimitMiddleware,
        limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)),
        rules=RuleSet([Rule("per-ip", "1/hour")], clock=clock),
    )
    async with peer_client(app) as client:
        assert (await client.get("/")).status_code == 200
        app.router.routes.append(Route("/health", health))
        for _ in range(3):
            assert (await client.get("/health")).status_code == 200
        assert (await client.get("/")).status_code == 429
