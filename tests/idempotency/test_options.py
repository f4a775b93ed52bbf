"""The middleware's bounds and failure answers, on real Starlette and Flask apps in-process."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from ratewarden.errors import ConfigurationError
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
)
from ratewarden.testing import ManualClock
from tests.client._live import free_port
from tests.idempotency._apps import Orders, flask_orders, starlette_orders

KEY = {"Idempotency-Key": "k"}


def client_for(app: Any) -> httpx.AsyncClient:
    """An in-process client on an ASGI app."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")


async def test_response_over_the_bound_is_not_stored() -> None:
    """A 5,000-byte answer with max_response_bytes=1000 is sent whole but not kept: retries run."""
    orders = Orders()
    store = AsyncMemoryIdempotencyStore()
    app = IdempotencyMiddleware(starlette_orders(orders), store, max_response_bytes=1000)
    async with client_for(app) as client:
        first = await client.post("/orders/big?mode=big", headers=KEY)
        second = await client.post("/orders/big?mode=big", headers=KEY)
    assert len(first.content) == len(second.content) == 5000
    assert "idempotent-replayed" not in second.headers
    assert orders.executed["big"] == 2
    assert len(store) == 0


async def test_body_over_the_bound_is_413_and_runs_nothing() -> None:
    """The body is fingerprinted in memory, so it is bounded: past it, 413."""
    orders = Orders()
    app = IdempotencyMiddleware(
        starlette_orders(orders), AsyncMemoryIdempotencyStore(), max_body_bytes=10
    )
    async with client_for(app) as client:
        response = await client.post("/orders/a", content=b"x" * 11, headers=KEY)
        fits = await client.post("/orders/a", content=b"x" * 10, headers=KEY)
    assert response.status_code == 413
    assert fits.status_code == 201
    assert orders.executed["a"] == 1


async def test_a_lock_past_its_ttl_blocks_no_longer(caplog: pytest.LogCaptureFixture) -> None:
    """A request stuck past lock_ttl (as if its worker died) stops blocking its key: the next
    request runs and is stored; the late first one is not stored over it, and says so."""
    orders, clock = Orders(), ManualClock()
    store = AsyncMemoryIdempotencyStore(clock=clock)
    app = IdempotencyMiddleware(starlette_orders(orders), store, lock_ttl=30)
    url = "/orders/a?mode=slow"
    async with client_for(app) as client:
        first = asyncio.create_task(client.post(url, headers=KEY))
        assert await asyncio.to_thread(orders.in_handler.wait, 5)
        assert (await client.post(url, headers=KEY)).status_code == 409
        clock.advance(30)
        orders.release.set()
        with caplog.at_level(logging.WARNING, "ratewarden.idempotency"):
            second = await client.post(url, headers=KEY)
            assert (await first).json()["order"] == 1
        third = await client.post(url, headers=KEY)
    assert second.json()["order"] == 2
    assert third.json()["order"] == 2 and third.headers["idempotent-replayed"] == "true"
    assert "lock expired" in caplog.text


def unreachable_store() -> AsyncRedisIdempotencyStore:
    client = aredis.Redis(
        port=free_port(), socket_connect_timeout=0.2, retry=AsyncRetry(NoBackoff(), 0)
    )
    return AsyncRedisIdempotencyStore(client)


async def test_unreachable_store_answers_503_by_default() -> None:
    """Without its store the middleware cannot promise once-only: 503 with Retry-After."""
    orders = Orders()
    app = IdempotencyMiddleware(starlette_orders(orders), unreachable_store())
    async with client_for(app) as client:
        response = await client.post("/orders/a", headers=KEY)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert orders.executed["a"] == 0


async def test_fail_open_runs_the_request_without_the_guarantee() -> None:
    """fail_open=True: the app runs (and reads its body) while the store is down."""
    orders = Orders()
    app = IdempotencyMiddleware(starlette_orders(orders), unreachable_store(), fail_open=True)
    async with client_for(app) as client:
        response = await client.post("/orders/a", content=b"pear", headers=KEY)
    assert response.json() == {"order": 1, "body": "pear"}


async def test_a_store_down_is_one_warning_a_minute_not_one_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Five requests while the store is unreachable (fail_open): each ran, and the store's
    failure was logged once, not five times, as the other middlewares' lines are."""
    orders = Orders()
    app = IdempotencyMiddleware(starlette_orders(orders), unreachable_store(), fail_open=True)
    with caplog.at_level(logging.WARNING, "ratewarden.idempotency"):
        async with client_for(app) as client:
            for n in range(5):
                key = {"Idempotency-Key": f"key-{n}"}
                assert (await client.post("/orders/a", headers=key)).status_code == 201
    begins = [r for r in caplog.records if "store failed at begin" in r.getMessage()]
    assert len(begins) == 1
    assert orders.executed["a"] == 5


async def test_fastapi_add_middleware_form() -> None:
    """FastAPI's app.add_middleware(IdempotencyMiddleware, store=...) wires it the same way."""
    from fastapi import FastAPI

    api = FastAPI()
    calls: list[int] = []

    @api.post("/pay")
    async def pay() -> dict[str, int]:
        calls.append(1)
        return {"payment": len(calls)}

    api.add_middleware(IdempotencyMiddleware, store=AsyncMemoryIdempotencyStore())
    async with client_for(api) as client:
        first = await client.post("/pay", headers=KEY)
        again = await client.post("/pay", headers=KEY)
    assert first.json() == again.json() == {"payment": 1}
    assert again.headers["idempotent-replayed"] == "true"


async def test_non_http_scopes_pass_through_untouched() -> None:
    """Lifespan and websocket scopes reach the app as they came."""
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    middleware = IdempotencyMiddleware(app, AsyncMemoryIdempotencyStore())
    for scope in ({"type": "lifespan"}, {"type": "websocket", "headers": [], "path": "/"}):
        await middleware(scope, None, None)  # type: ignore[arg-type]
    assert [s["type"] for s in seen] == ["lifespan", "websocket"]


def test_flask_app_in_process_replays_and_scopes_by_identity() -> None:
    """The WSGI flavour on Flask's test client: replay per user, 422 on another body."""
    orders = Orders()
    app = flask_orders(orders)
    app.wsgi_app = WSGIIdempotencyMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, MemoryIdempotencyStore(), identity=lambda env: env.get("HTTP_X_USER")
    )
    client = app.test_client()

    def post(body: bytes, user: str) -> Any:
        response = client.post("/orders/a", data=body, headers={**KEY, "X-User": user})
        response.get_data()  # the test client streams: send the body, as a server would
        return response

    first, replay = post(b"one", "u1"), post(b"one", "u1")
    other_user, other_body = post(b"one", "u2"), post(b"two", "u1")
    assert first.status_code == replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.get_json() == first.get_json() == {"order": 1, "body": "one"}
    assert other_user.get_json()["order"] == 2
    assert other_body.status_code == 422
    assert orders.executed["a"] == 2


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"lock_ttl": 0}, "lock_ttl=0"),
        ({"ttl": float("inf")}, "ttl=inf"),
        ({"max_body_bytes": -1}, "max_body_bytes=-1"),
        ({"max_response_bytes": 1.5}, "max_response_bytes=1.5"),
        ({"methods": "POST"}, "methods='POST'"),
        ({"methods": 3}, "methods=3"),
        ({"methods": ["POST PATCH"]}, "methods: 'POST PATCH' is not a method name"),
        ({"store_response": 200}, "store_response=200"),
    ],
)
def test_bad_options_are_configuration_errors(options: dict[str, Any], words: str) -> None:
    """Each bad option is refused up front, naming the option and the value."""
    with pytest.raises(ConfigurationError, match=words):
        IdempotencyMiddleware(starlette_orders(Orders()), AsyncMemoryIdempotencyStore(), **options)


def test_a_store_of_the_wrong_flavour_is_refused() -> None:
    """ASGI needs an async store and WSGI a sync one; the error says which to use."""
    with pytest.raises(ConfigurationError, match="AsyncMemoryIdempotencyStore"):
        IdempotencyMiddleware(starlette_orders(Orders()), MemoryIdempotencyStore())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="a sync store"):
        WSGIIdempotencyMiddleware(flask_orders(Orders()), AsyncMemoryIdempotencyStore())  # type: ignore[arg-type]
