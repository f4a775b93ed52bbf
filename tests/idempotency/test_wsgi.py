"""WSGIIdempotencyMiddleware on Flask under werkzeug's threaded server on loopback,
driven by ratewarden's requests client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from ratewarden.client import RetryPolicy, retry_session
from ratewarden.middleware.idempotency import WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import MemoryIdempotencyStore, RedisIdempotencyStore
from tests._servers import RedisServer
from tests.client._fakes import RecordingClock
from tests.client._live import LiveWSGI
from tests.idempotency._apps import Orders, WSGILossyGateway, flask_orders
from tests.idempotency.conftest import unique_prefix


@pytest.fixture(scope="module")
def orders() -> Orders:
    """Execution counts of every server in this module."""
    return Orders()


@pytest.fixture(scope="module")
def servers(orders: Orders, redis_server: RedisServer) -> Iterator[dict[str, LiveWSGI]]:
    """Flask behind a lossy gateway: with the memory store, Redis, or no middleware."""
    stores: dict[str, Any] = {
        "memory": MemoryIdempotencyStore(),
        "redis": RedisIdempotencyStore(redis_server.client(), prefix=unique_prefix()),
    }
    running = {}
    for kind, store in stores.items():
        app = flask_orders(orders)
        app.wsgi_app = WSGIIdempotencyMiddleware(app.wsgi_app, store)  # type: ignore[method-assign]
        running[kind] = LiveWSGI(WSGILossyGateway(app))
    running["none"] = LiveWSGI(WSGILossyGateway(flask_orders(orders)))
    yield running
    for server in running.values():
        server.stop()


def post_through_lossy_gateway(server: LiveWSGI, name: str) -> requests.Response:
    """A keyed POST whose first response the gateway loses; the client retries it."""
    policy = RetryPolicy(idempotency_keys=True)
    with retry_session(policy, clock=RecordingClock(), random=lambda: 0.0) as session:
        return session.post(  # type: ignore[no-any-return]
            f"{server.url}/orders/{name}", data=b"3 pears", headers={"X-Lose-Response": "1"}
        )


@pytest.fixture(params=["memory", "redis"])
def server(request: pytest.FixtureRequest, servers: dict[str, LiveWSGI]) -> LiveWSGI:
    """The orders server with the middleware, on each store in turn."""
    return servers[request.param]


def test_retried_post_whose_response_was_lost_runs_once(
    server: LiveWSGI, orders: Orders, name: str
) -> None:
    """The retry with the same key gets the first run's 201, replayed; one execution."""
    response = post_through_lossy_gateway(server, name)
    assert response.status_code == 201
    assert response.headers["Idempotent-Replayed"] == "true"
    assert response.json() == {"order": 1, "body": "3 pears"}
    assert orders.executed[name] == 1


def test_without_the_middleware_the_same_retry_runs_twice(
    servers: dict[str, LiveWSGI], orders: Orders, name: str
) -> None:
    """The control: the lost-response retry creates a second order."""
    assert post_through_lossy_gateway(servers["none"], name).json()["order"] == 2
    assert orders.executed[name] == 2


def test_concurrent_duplicate_gets_409(server: LiveWSGI, orders: Orders, name: str) -> None:
    """On a threaded WSGI server, a duplicate arriving mid-request gets 409, then the replay."""
    url, headers = f"{server.url}/orders/{name}?mode=slow", {"Idempotency-Key": "w-1"}
    first, duplicate = orders.duplicate_while_held(
        lambda: requests.post(url, headers=headers, timeout=10)
    )
    assert duplicate.status_code == 409
    assert duplicate.headers["Retry-After"] == "1"
    assert first.status_code == 201
    replay = requests.post(url, headers=headers, timeout=10)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert orders.executed[name] == 1
