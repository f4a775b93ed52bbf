"""The concurrency and token budget middlewares' failure mode: a dead store is never a 500.

Against real redis-servers, stopped or black-holed behind the fault proxy: with
``failure_mode="open"`` (the default) the app runs without a slot or a reservation,
with ``"closed"`` the middleware answers 503 with ``Retry-After``; either way the
request is counted in ``metrics.degraded`` under the middleware's name. When the
store is back, slots and budgets are enforced again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden import AsyncLimiter, Limiter
from ratewarden.budgets import AsyncTokenBudget
from ratewarden.limiter import CircuitBreaker
from ratewarden.middleware import by_api_key
from ratewarden.middleware.budget import TokenBudgetMiddleware
from ratewarden.middleware.concurrency import ConcurrencyMiddleware, WSGIConcurrencyMiddleware
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._metrics import Recorded
from tests._servers import STORE_TIMEOUT
from tests.faults._proxy import Fault
from tests.middleware._helpers import client_for, ok
from tests.middleware.conftest import Proxied

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

KEY = {"x-api-key": "tenant-a"}
LIMITS = {"requests": "100/minute", "tokens": "10000/minute"}


def slots_app(limiter: AsyncLimiter, **options: Any) -> Starlette:
    app = Starlette(routes=[Route("/", ok, methods=["GET", "HEAD"])])
    app.add_middleware(
        ConcurrencyMiddleware, limiter=limiter, limit=1, key=by_api_key(), ttl=30, **options
    )
    return app


def budget_app(budget: AsyncTokenBudget, **options: Any) -> Starlette:
    app = Starlette(routes=[Route("/", ok, methods=["GET", "HEAD"])])
    app.add_middleware(
        TokenBudgetMiddleware,
        budget=budget,
        estimate=lambda request, body: 100,
        key=by_api_key(),
        **options,
    )
    return app


def assert_503(response: httpx.Response, retry_after: str = "1") -> None:
    assert response.status_code == 503
    assert response.headers["retry-after"] == retry_after
    assert response.headers["cache-control"] == "no-store"
    assert json.loads(response.content)["status"] == 503
    assert not [n for n in response.headers if n.startswith(("ratelimit", "x-ratelimit"))]


@pytest.fixture
async def stopped_store(stopped: str) -> AsyncIterator[AsyncRedisStore]:
    """An AsyncRedisStore on the stopped redis-server; closed after the test."""
    store = AsyncRedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
    yield store
    await store.aclose()


async def get_once(app: Starlette) -> httpx.Response:
    """One keyed ``GET /`` through ``app``."""
    async with client_for(app) as client:
        return await client.get("/", headers=KEY)


@pytest.mark.parametrize(("failure", "status"), [("open", 200), ("closed", 503)])
async def test_concurrency_with_redis_stopped_answers_by_the_policy(
    stopped_store: AsyncRedisStore, failure: str, status: int
) -> None:
    """ASGI slots over a stopped Redis: the app runs (open, the default) or 503 (closed)."""
    metrics = Recorded()
    options: dict[str, Any] = {"metrics": metrics}
    if failure == "closed":
        options["failure_mode"] = "closed"
    response = await get_once(slots_app(AsyncLimiter(stopped_store), **options))
    assert response.status_code == status
    if failure == "open":
        assert response.text == "ok"
    else:
        assert_503(response)
    assert metrics.degraded_calls == [("inflight", failure, "StorageUnavailableError")]


async def test_concurrency_black_holed_fails_open_then_enforces_again(
    proxied_store: Proxied,
) -> None:
    """Redis black-holed: requests run without a slot; healed, one slot per key again."""
    proxy, store = proxied_store()
    limiter = AsyncLimiter(store)
    metrics = Recorded()
    async with client_for(slots_app(limiter, metrics=metrics)) as client:
        assert (await client.get("/", headers=KEY)).status_code == 200  # connected
        proxy.set_fault(Fault.BLACKHOLE)
        responses = [await client.get("/", headers=KEY) for _ in range(3)]
        assert [r.status_code for r in responses] == [200] * 3
        assert [m for _, m, _ in metrics.degraded_calls] == ["open"] * 3
        proxy.set_fault(Fault.NONE)
        await client.get("/", headers=KEY)  # may ride on a connection begun in the fault
        held = await limiter.acquire_slot("inflight:" + _identity(), 1, ttl=30)
        assert held.allowed  # the store answers again, and no slot of the outage is held
        refused = await client.get("/", headers=KEY)
        assert refused.status_code == 429
        await limiter.release_slot(held)


async def test_concurrency_closed_with_the_limiters_breaker_open_waits_for_its_probe(
    stopped_store: AsyncRedisStore,
) -> None:
    """The limiter's breaker: open after two failures, the 503's Retry-After is its probe."""
    clock = ManualClock()
    breaker = CircuitBreaker(failures=2, failure_ratio=None, cooldown=4.5, clock=clock)
    metrics = Recorded()
    limiter = AsyncLimiter(stopped_store, breaker=breaker)
    async with client_for(slots_app(limiter, failure_mode="closed", metrics=metrics)) as client:
        _ = [await client.get("/", headers=KEY) for _ in range(2)]
        clock.advance(1)
        response = await client.get("/", headers=KEY)
    assert_503(response, retry_after="4")
    assert [reason for _, _, reason in metrics.degraded_calls][-1] == "breaker_open"


@pytest.mark.parametrize(("failure", "status"), [("open", 200), ("closed", 503)])
def test_wsgi_concurrency_with_redis_stopped_answers_by_the_policy(
    stopped: str, failure: str, status: int
) -> None:
    """Flask slots over a stopped Redis: 200 from the view (open) or 503 (closed)."""
    store = RedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
    flask = Flask(__name__)
    flask.add_url_rule("/", "home", lambda: "home")
    metrics = Recorded()
    flask.wsgi_app = WSGIConcurrencyMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app, limiter=Limiter(store), limit=1, failure_mode=failure, metrics=metrics
    )
    try:
        response = flask.test_client().get("/")
    finally:
        store.close()
    assert response.status_code == status
    if failure == "open":
        assert response.get_data() == b"home"
    else:
        assert response.headers["Retry-After"] == "1"
        assert json.loads(response.get_data())["status"] == 503
    assert metrics.degraded_calls == [("inflight", failure, "StorageUnavailableError")]


@pytest.mark.parametrize(("failure", "status"), [("open", 200), ("closed", 503)])
async def test_token_budget_with_redis_stopped_answers_by_the_policy(
    stopped_store: AsyncRedisStore, failure: str, status: int
) -> None:
    """A budget over a stopped Redis: the app runs with no budget headers (open), or 503."""
    budget = AsyncTokenBudget(stopped_store, LIMITS, max_output_tokens=100)
    metrics = Recorded()
    response = await get_once(budget_app(budget, failure_mode=failure, metrics=metrics, name="llm"))
    assert response.status_code == status
    if failure == "open":
        assert response.text == "ok"
        assert not [n for n in response.headers if n.startswith(("ratelimit", "x-ratelimit"))]
    else:
        assert_503(response)
    assert metrics.degraded_calls == [("llm", failure, "StorageUnavailableError")]


async def test_token_budget_black_holed_fails_open_then_reserves_again(
    proxied_store: Proxied,
) -> None:
    """Redis black-holed: the app runs unbudgeted; healed, requests reserve (headers) again."""
    proxy, store = proxied_store()
    budget = AsyncTokenBudget(store, LIMITS, max_output_tokens=100)
    metrics = Recorded()
    async with client_for(budget_app(budget, metrics=metrics)) as client:
        assert "x-ratelimit-remaining-tokens" in (await client.get("/", headers=KEY)).headers
        proxy.set_fault(Fault.BLACKHOLE)
        response = await client.get("/", headers=KEY)
        assert (response.status_code, response.text) == (200, "ok")
        assert "x-ratelimit-remaining-tokens" not in response.headers
        assert metrics.degraded_calls == [("budget", "open", "StorageUnavailableError")]
        proxy.set_fault(Fault.NONE)
        await client.get("/", headers=KEY)  # may ride on a connection begun in the fault
        assert "x-ratelimit-remaining-tokens" in (await client.get("/", headers=KEY)).headers


def _identity() -> str:
    from ratewarden.middleware import RequestInfo

    found = by_api_key()(RequestInfo("GET", "/", None, KEY, {}))
    assert found is not None
    return found
