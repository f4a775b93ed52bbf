"""IdempotencyMiddleware (ASGI) on Starlette under a real uvicorn server on loopback.

The acceptance test: a POST whose response a gateway lost is retried by
ratewarden's client with the same Idempotency-Key, and runs once, with the
memory store and with Redis. The same flow without the middleware runs twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aredis

from ratewarden.client import RetryPolicy, RetryTransport
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore, AsyncRedisIdempotencyStore
from tests._servers import RedisServer
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI
from tests.idempotency._apps import LossyGateway, Orders, starlette_orders
from tests.idempotency.conftest import unique_prefix


def by_user(scope: Any) -> str | None:
    """The caller's identity: the X-User header (a stand-in for an authenticated user)."""
    return dict(scope["headers"]).get(b"x-user", b"").decode() or None


@pytest.fixture(scope="module")
def orders() -> Orders:
    """Execution counts of every server in this module."""
    return Orders()


@pytest.fixture(scope="module")
def servers(orders: Orders, redis_server: RedisServer) -> Iterator[dict[str, LiveASGI]]:
    """The orders app behind a lossy gateway: with the memory store, Redis, or no middleware."""
    app = starlette_orders(orders)
    redis_client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
    stores = {
        "memory": AsyncMemoryIdempotencyStore(),
        "redis": AsyncRedisIdempotencyStore(redis_client, prefix=unique_prefix()),
    }
    running = {
        kind: LiveASGI(LossyGateway(IdempotencyMiddleware(app, store, identity=by_user)))
        for kind, store in stores.items()
    }
    running["none"] = LiveASGI(LossyGateway(app))
    yield running
    for server in running.values():
        server.stop()


@pytest.fixture(params=["memory", "redis"])
def server(request: pytest.FixtureRequest, servers: dict[str, LiveASGI]) -> LiveASGI:
    """The orders server with the middleware, on each store in turn."""
    return servers[request.param]


@pytest.fixture
def memory_url(servers: dict[str, LiveASGI], name: str) -> str:
    """This test's order URL on the server with the memory store."""
    return f"{servers['memory'].url}/orders/{name}"


def retrying_client(server: LiveASGI) -> httpx.Client:
    """ratewarden's client with Idempotency-Keys on; its sleeps are recorded, not slept."""
    transport = RetryTransport(
        policy=RetryPolicy(idempotency_keys=True), clock=RecordingClock(), random=lambda: 0.0
    )
    return httpx.Client(base_url=server.url, transport=transport, timeout=10)


def test_retried_post_whose_response_was_lost_runs_once(
    server: LiveASGI, orders: Orders, name: str
) -> None:
    """First attempt runs, its response is lost (503); the retry gets the stored 201, replayed."""
    with retrying_client(server) as client:
        response = client.post(
            f"/orders/{name}", content=b"2 apples", headers={"X-Lose-Response": "1"}
        )
    assert response.status_code == 201
    assert response.headers["idempotent-replayed"] == "true"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"order": 1, "body": "2 apples"}
    assert orders.executed[name] == 1


def test_without_the_middleware_the_same_retry_runs_twice(
    servers: dict[str, LiveASGI], orders: Orders, name: str
) -> None:
    """The control: the lost-response retry creates a second order."""
    with retrying_client(servers["none"]) as client:
        response = client.post(
            f"/orders/{name}", content=b"2 apples", headers={"X-Lose-Response": "1"}
        )
    assert response.json() == {"order": 2, "body": "2 apples"}
    assert orders.executed[name] == 2


def test_concurrent_duplicate_gets_409_then_the_replay(
    server: LiveASGI, orders: Orders, name: str
) -> None:
    """While the first request runs, a duplicate gets 409 and Retry-After; then the replay."""
    url, headers = f"{server.url}/orders/{name}?mode=slow", {"Idempotency-Key": "k-1"}
    first, duplicate = orders.duplicate_while_held(lambda: httpx.post(url, headers=headers))
    assert duplicate.status_code == 409
    assert duplicate.headers["retry-after"] == "1"
    assert duplicate.headers["content-type"] == "application/problem+json"
    assert duplicate.json()["status"] == 409
    assert first.status_code == 201
    replay = httpx.post(url, headers=headers)
    assert (replay.status_code, replay.headers["idempotent-replayed"]) == (201, "true")
    assert orders.executed[name] == 1


DUPLICATES = 30


async def test_a_burst_of_duplicates_runs_exactly_once(
    server: LiveASGI, orders: Orders, name: str
) -> None:
    """30 concurrent requests with one key: one runs, the other 29 get 409 while it is held."""
    orders.in_handler.clear()
    orders.release.clear()
    url, headers = f"{server.url}/orders/{name}?mode=slow", {"Idempotency-Key": "burst"}
    async with httpx.AsyncClient(timeout=10) as client:
        tasks = [asyncio.create_task(client.post(url, headers=headers)) for _ in range(DUPLICATES)]
        try:
            assert await asyncio.to_thread(orders.in_handler.wait, 5)
            async with asyncio.timeout(10):
                while sum(t.done() for t in tasks) < DUPLICATES - 1:
                    await asyncio.sleep(0.01)
        finally:
            orders.release.set()
        statuses = Counter(r.status_code for r in await asyncio.gather(*tasks))
    assert statuses == {201: 1, 409: DUPLICATES - 1}
    assert orders.executed[name] == 1


def test_same_key_with_another_body_is_422_and_runs_nothing(
    server: LiveASGI, orders: Orders, name: str
) -> None:
    """Reusing a key for a different payload is a client bug, answered 422."""
    with httpx.Client(base_url=server.url) as client:
        headers = {"Idempotency-Key": "k-2"}
        assert client.post(f"/orders/{name}", content=b"a", headers=headers).status_code == 201
        other = client.post(f"/orders/{name}", content=b"b", headers=headers)
        query = client.post(f"/orders/{name}?x=1", content=b"a", headers=headers)
    assert other.status_code == 422
    assert "another request body" in other.json()["detail"]
    assert query.status_code == 422
    assert orders.executed[name] == 1


def test_keys_are_scoped_per_identity_method_and_path(
    servers: dict[str, LiveASGI], orders: Orders, name: str
) -> None:
    """One key used by two users, or on PATCH and POST, or on two paths, is four requests."""
    with httpx.Client(base_url=servers["memory"].url) as client:
        key = {"Idempotency-Key": "shared"}
        alice = client.post(f"/orders/{name}", headers={**key, "X-User": "alice"})
        bob = client.post(f"/orders/{name}", headers={**key, "X-User": "bob"})
        patch = client.patch(f"/orders/{name}", headers={**key, "X-User": "alice"})
        other = client.post(f"/orders/{name}-2", headers={**key, "X-User": "alice"})
        again = client.post(f"/orders/{name}", headers={**key, "X-User": "bob"})
    assert [r.json()["order"] for r in (alice, bob, patch)] == [1, 2, 3]
    assert other.json()["order"] == 1
    assert again.json()["order"] == 2 and again.headers["idempotent-replayed"] == "true"


@pytest.mark.parametrize(
    "headers",
    [
        [("Idempotency-Key", "has space")],
        [("Idempotency-Key", "x" * 256)],
        [("Idempotency-Key", "")],
        [("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
    ],
)
def test_malformed_keys_are_400_and_run_nothing(
    memory_url: str, orders: Orders, name: str, headers: list[tuple[str, str]]
) -> None:
    """A key the middleware cannot trust is refused with a problem+json 400."""
    response = httpx.post(memory_url, headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert orders.executed[name] == 0


def test_quoted_and_bare_forms_are_one_key(memory_url: str, orders: Orders, name: str) -> None:
    """The IETF draft sends the key as a quoted sf-string; Stripe-style clients send it bare."""
    httpx.post(memory_url, headers={"Idempotency-Key": '"k-3"'})
    replay = httpx.post(memory_url, headers={"Idempotency-Key": "k-3"})
    assert replay.headers["idempotent-replayed"] == "true"
    assert orders.executed[name] == 1


def test_reads_and_keyless_writes_pass_through(memory_url: str, orders: Orders, name: str) -> None:
    """GET (even with a key) and POST without a key run every time."""
    for _ in range(2):
        httpx.get(memory_url, headers={"Idempotency-Key": "k-4"})
        httpx.post(memory_url)
    assert orders.executed[name] == 4


@pytest.mark.parametrize("mode", ["error", "crash"])
def test_failed_requests_are_not_stored_so_a_retry_runs_again(
    servers: dict[str, LiveASGI], orders: Orders, name: str, mode: str
) -> None:
    """A 500, or a handler that raised, releases the key: the retry runs."""
    url, headers = f"{servers['redis'].url}/orders/{name}?mode={mode}", {"Idempotency-Key": "k"}
    statuses = [httpx.post(url, headers=headers).status_code for _ in range(2)]
    assert statuses == [500, 500]
    assert orders.executed[name] == 2
