"""A HotKeyLimiter as the middleware's limiter, on the 3-primary Cluster: Flask behind the WSGI
middleware and Starlette behind the ASGI one answer 200 until the rule's limit, then 429, for
an ordinary key and for a hot key on cells or on leases (the middleware calls
``hit(key, rates, cost, shadow=...)``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aredis
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden.hotkeys import AsyncCellLimiter, AsyncHotKeyLimiter, CellLimiter, HotKeyLimiter
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier
from tests.middleware._helpers import ok

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

#: The tenant rule's store key for API key "big" is "tenant:big": the configured hot key. Two
#: rules, so that the ASGI middleware takes its general path too (one rule's scope path asks
#: ``hit(key, rates, cost)`` alone; the general path passes ``shadow``).
RULES = [Rule("per-ip", "100/minute"), Rule("tenant", "3/minute", key=by_api_key())]
HOT = ["tenant:big"]
#: Who asks, and whether its key is hot.
CALLERS = [("small", "ordinary"), ("big", "cells"), ("big", "leases")]


@pytest.mark.parametrize(("api_key", "path"), CALLERS)
def test_flask_behind_the_wsgi_middleware_with_a_hot_key_limiter(
    cluster_client: redis.RedisCluster, api_key: str, path: str
) -> None:
    """Three requests 200 (with RateLimit headers), the fourth 429 with Retry-After."""
    clock = ManualClock()
    store = RedisStore(cluster_client, clock=clock, timeout=1.0)
    mitigation: Any = TwoTier(store, lease=2) if path == "leases" else CellLimiter(store, 3)
    app = Flask(__name__)
    app.add_url_rule("/items", "items", lambda: "items")
    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        limiter=HotKeyLimiter(store, mitigation, hot_keys=HOT),
        rules=RuleSet(RULES, clock=clock),
    )
    client = app.test_client()
    answers = [client.get("/items", headers={"X-Api-Key": api_key}) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].data == b"items" and "RateLimit" in answers[0].headers
    assert int(answers[3].headers["Retry-After"]) > 0


@pytest.mark.parametrize(("api_key", "path"), CALLERS)
async def test_starlette_behind_the_asgi_middleware_with_an_async_hot_key_limiter(
    async_client: aredis.RedisCluster, api_key: str, path: str
) -> None:
    """The same through RateLimitMiddleware and an AsyncHotKeyLimiter: 200, 200, 200, 429."""
    clock = ManualClock()
    store = AsyncRedisStore(async_client, clock=clock, timeout=1.0)
    mitigation: Any = (
        AsyncTwoTier(store, lease=2) if path == "leases" else AsyncCellLimiter(store, 3)
    )
    app = Starlette(routes=[Route("/", ok)])
    app.add_middleware(
        RateLimitMiddleware,
        limiter=AsyncHotKeyLimiter(store, mitigation, hot_keys=HOT),
        rules=RuleSet(RULES, clock=clock),
    )
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers = [await client.get("/", headers={"x-api-key": api_key}) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert "ratelimit" in answers[0].headers
        assert int(answers[3].headers["retry-after"]) > 0
    finally:
        await store.aclose()
