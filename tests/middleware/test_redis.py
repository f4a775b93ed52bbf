"""The middleware on a real redis-server: store calls per request, and 4,000 requests in flight."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest
import redis
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.middleware._helpers import http_scope, ok

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

#: Every header family on: draft fields with pk, legacy with epoch reset, GitHub's extras.
ALL_HEADERS = HeaderOptions(
    legacy=True, github=True, reset="epoch", partition_key=True, all_policies=True, retry_jitter=1
)
REQUESTS = 60


def command_calls(client: redis.Redis) -> Counter[str]:
    """Calls per command since the last CONFIG RESETSTAT, without the counting commands."""
    stats = client.info("commandstats")
    calls = Counter({name: int(entry["calls"]) for name, entry in stats.items()})
    for own in ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_config"):
        calls.pop(own, None)
    return calls


def _asgi(store: AsyncRedisStore, rules: list[Rule], clock: ManualClock) -> Starlette:
    app = Starlette(routes=[Route("/", ok, methods=["GET", "POST"])])
    ruleset = RuleSet(rules, clock=clock, headers=ALL_HEADERS)
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(store), rules=ruleset)
    return app


async def test_asgi_one_script_call_per_request_with_every_header_on(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """Headers come from the one Decision: Redis sees exactly what bare hits cause, nothing more."""
    clock = ManualClock()
    store = AsyncRedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    rate = [Rate.parse("3/minute")]
    rule = Rule("contract", rate, key=by_api_key(), cost={"GET": 1, "POST": 2})
    app = _asgi(store, [rule], clock)
    limiter = AsyncLimiter(store)
    transport = httpx.ASGITransport(app=app)
    try:
        await limiter.hit("warm-up", rate)  # loads the script
        redis_client.config_resetstat()
        for i in range(REQUESTS):
            await limiter.hit(f"contract:bare-{i}", rate, 2)
            await limiter.hit(f"contract:bare-{i}", rate, 2)
        bare = command_calls(redis_client)
        redis_client.config_resetstat()
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            codes = []
            for i in range(REQUESTS):
                for _ in range(2):
                    response = await client.post("/", headers={"x-api-key": f"k{i}"})
                    codes.append(response.status_code)
                    assert "ratelimit" in response.headers
                    assert "x-ratelimit-used" in response.headers
        with_headers = command_calls(redis_client)
    finally:
        await store.aclose()
    assert codes == [200, 429] * REQUESTS
    assert with_headers["cmdstat_evalsha"] == 2 * REQUESTS
    assert with_headers == bare


def test_wsgi_one_script_call_per_request_with_every_header_on(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """The WSGI twin on RedisStore: one EVALSHA per request, allowed or denied, headers on."""
    clock = ManualClock()
    store = RedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    app = Flask(__name__)
    app.add_url_rule("/", "ok", lambda: "ok")
    ruleset = RuleSet([Rule("per-ip", "5/minute")], clock=clock, headers=ALL_HEADERS)
    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=Limiter(store), rules=ruleset
    )
    try:
        Limiter(store).hit("warm-up", Rate.parse("5/minute"))
        redis_client.config_resetstat()
        client = app.test_client()
        codes = [client.get("/").status_code for _ in range(REQUESTS)]
        calls = command_calls(redis_client)
    finally:
        store.close()
    assert codes == [200] * 5 + [429] * (REQUESTS - 5)
    assert calls["cmdstat_evalsha"] == REQUESTS


async def test_layered_rules_cost_one_script_call_each(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """Two rules on different keys are two calls; a denial by the first spares the second."""
    clock = ManualClock()
    store = AsyncRedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    rules = [Rule("per-ip", "4/minute"), Rule("contract", "100/minute", key=by_api_key())]
    app = _asgi(store, rules, clock)
    try:
        await AsyncLimiter(store).hit("warm-up", Rate.parse("1/s"))
        redis_client.config_resetstat()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t"
        ) as client:
            codes = [(await client.get("/")).status_code for _ in range(10)]
        calls = command_calls(redis_client)
    finally:
        await store.aclose()
    assert codes == [200] * 4 + [429] * 6
    assert calls["cmdstat_evalsha"] == 4 * 2 + 6


async def test_4000_concurrent_requests_on_one_asyncio_app(redis_server: RedisServer) -> None:
    """4,000 requests in flight at once on AsyncRedisStore: no pool errors, exact counts."""
    total, keys, per_key = 4000, 40, 50
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    rule = Rule("contract", "50/hour", key=by_api_key())
    clock = ManualClock()
    inner = _asgi(store, [rule], clock)
    in_flight = peak = 0

    async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await inner(scope, receive, send)
        finally:
            in_flight -= 1

    async def request(i: int) -> int:
        status = 0

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        headers = [(b"host", b"t"), (b"x-api-key", f"tenant-{i % keys}".encode())]
        scope = http_scope(
            "GET", "/", headers, client=("198.51.100.1", 1000 + i % 50000), server=("t", 80)
        )
        await counting(scope, receive, send)
        return status

    try:
        statuses = await asyncio.wait_for(
            asyncio.gather(*(request(i) for i in range(total))), timeout=90
        )
    finally:
        await store.aclose()
    assert peak == total
    assert Counter(statuses) == {200: keys * per_key, 429: total - keys * per_key}


async def test_negatively_cached_key_costs_no_store_call_and_keeps_its_headers(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """Behind AsyncTwoTier, a key known to be over its limit is refused without Redis."""
    from ratewarden.tiers import AsyncTwoTier

    clock = ManualClock()
    store = AsyncRedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    tiers = AsyncTwoTier(store, clock=clock)
    app = Starlette(routes=[Route("/", ok)])
    ruleset = RuleSet([Rule("per-ip", "3/minute")], clock=clock, headers=ALL_HEADERS)
    app.add_middleware(RateLimitMiddleware, limiter=tiers, rules=ruleset)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t"
        ) as client:
            codes = [(await client.get("/")).status_code for _ in range(4)]
            redis_client.config_resetstat()
            cached = [await client.get("/") for _ in range(20)]
            calls = command_calls(redis_client)
    finally:
        await store.aclose()
    assert codes == [200, 200, 200, 429]
    assert {r.status_code for r in cached} == {429}
    assert calls["cmdstat_evalsha"] == 0
    assert all(int(r.headers["retry-after"]) >= 20 for r in cached)
    assert all("ratelimit" in r.headers for r in cached)
