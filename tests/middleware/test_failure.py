"""The middlewares' failure mode: a slow or dead store never turns into a 500.

Against real redis-servers: thousands of concurrent requests through Starlette at
the store's default timeout are all decided by Redis; with the store stopped or
black-holed (the fault proxy) requests are let through (``open``, the default) or
refused with 503 (``closed``), counted in ``metrics.degraded`` and logged once per
interval.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden import AsyncLimiter, Limiter
from ratewarden.errors import ConfigurationError
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
)
from ratewarden.storage.redis import DEFAULT_TIMEOUT, AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import CircuitBreaker
from tests._metrics import Recorded
from tests._servers import HOST, STORE_TIMEOUT, RedisServer, free_port
from tests.faults._proxy import Fault
from tests.middleware._helpers import client_for, ok
from tests.middleware.conftest import Proxied

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LOGGER = "ratewarden.middleware"


def starlette_app(limiter: Any, rules: RuleSet, **policy: Any) -> Starlette:
    app = Starlette(routes=[Route("/", ok, methods=["GET", "HEAD"])])
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=rules, **policy)
    return app


def rate_limit_headers(response: httpx.Response) -> list[str]:
    return [name for name in response.headers if name.startswith(("ratelimit", "x-ratelimit"))]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_3000_concurrent_requests_at_the_default_timeout_are_all_decided_by_redis(
    redis_server: RedisServer,
) -> None:
    """3,000 requests in flight on one app over AsyncRedisStore (20 ms): exact counts, no 500.

    30 API keys of 100 requests each on a limit of 60: 1,800 allowed and 1,200 denied,
    every one by Redis (none degraded, each with its RateLimit header).
    """
    total, keys, limit = 3000, 30, 60
    store = AsyncRedisStore.from_url(redis_server.url, clock=ManualClock(), prefix="mw3000")
    assert store.timeout == DEFAULT_TIMEOUT
    metrics = Recorded()
    rules = RuleSet([Rule("contract", f"{limit}/hour", key=by_api_key())], clock=ManualClock())
    inner = starlette_app(AsyncLimiter(store), rules, metrics=metrics)
    in_flight = peak = 0

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await inner(scope, receive, send)
        finally:
            in_flight -= 1

    # Connected first: on this shared machine a cold connect's handshake can miss 20 ms.
    assert any([await store.ping() for _ in range(10)])
    async with client_for(counting) as client:
        try:
            responses = await asyncio.gather(
                *(
                    client.get("/", headers={"x-api-key": f"tenant-{i % keys}"})
                    for i in range(total)
                )
            )
        finally:
            await store.aclose()
    assert peak == total
    assert Counter(r.status_code for r in responses) == {
        200: keys * limit,
        429: total - keys * limit,
    }
    assert all("ratelimit" in r.headers for r in responses)
    assert metrics.degraded_calls == []


async def test_a_black_holed_store_fails_open_counted_and_logged_once_per_interval(
    proxied_store: Proxied, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis behind a black hole: 500 concurrent requests all reach the app, without headers.

    Each is counted as degraded (open, StorageUnavailableError); one warning is
    logged, and the next one, an interval later, says how many were held back.
    When the proxy heals, Redis decides again.
    """
    # The fault tests' 100 ms: a cold first call through the proxy can miss 20 ms here.
    proxy, store = proxied_store(clock=ManualClock())
    metrics, clock = Recorded(), ManualClock()
    rules = RuleSet([Rule("per-ip", "1000/minute")], clock=clock)
    app = starlette_app(AsyncLimiter(store), rules, metrics=metrics, name="api")
    async with client_for(app) as client:
        assert "ratelimit" in (await client.get("/")).headers  # healthy, connected
        proxy.set_fault(Fault.BLACKHOLE)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            responses = await asyncio.gather(*(client.get("/") for _ in range(500)))
            assert [r.status_code for r in responses] == [200] * 500
            assert {r.text for r in responses} == {"ok"}
            assert all(rate_limit_headers(r) == [] for r in responses)
            assert metrics.degraded_calls == [("api", "open", "StorageUnavailableError")] * 500
            [line] = warnings(caplog)
            assert "'api'" in line and "failure mode 'open'" in line
            clock.advance(60)
            assert (await client.get("/")).status_code == 200
            later = warnings(caplog)[1:]
            assert len(later) == 1 and "(499 similar lines suppressed)" in later[0]
        proxy.set_fault(Fault.NONE)
        await client.get("/")  # may still ride on a connection begun during the fault
        assert "ratelimit" in (await client.get("/")).headers


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_closed_policy_answers_503_with_retry_after_and_no_quota(
    make_redis: Callable[..., RedisServer], method: str
) -> None:
    """failure_mode="closed", Redis stopped: 503, Retry-After 1, a problem document, no RateLimit.

    A HEAD gets the same headers and no body.
    """
    server = make_redis()
    store = AsyncRedisStore.from_url(server.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    metrics = Recorded()
    rules = RuleSet([Rule("per-ip", "5/minute")], clock=ManualClock())
    app = starlette_app(AsyncLimiter(store), rules, failure_mode="closed", metrics=metrics)
    try:
        async with client_for(app) as client:
            assert (await client.request(method, "/")).status_code == 200
            server.stop()
            response = await client.request(method, "/")
    finally:
        await store.aclose()
    assert response.status_code == 503
    assert rate_limit_headers(response) == []
    assert response.headers["retry-after"] == "1"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["content-type"] == "application/problem+json"
    if method == "HEAD":
        assert response.content == b""
    else:
        problem = json.loads(response.content)
        assert (problem["status"], problem["retry_after"]) == (503, 1)
        assert int(response.headers["content-length"]) == len(response.content)
    assert metrics.degraded_calls == [("middleware", "closed", "StorageUnavailableError")]


class CountingStore(AsyncRedisStore):
    """An AsyncRedisStore that counts its ``hit`` calls (the store calls a request makes)."""

    calls = 0

    async def hit(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return await super().hit(*args, **kwargs)


@pytest.mark.parametrize("where", ["limiter", "middleware"])
async def test_an_open_breaker_answers_without_calling_the_store(where: str) -> None:
    """The limiter's breaker: two failures open it; then requests take the middleware's
    policy with no store call. ``breaker=`` on the middleware (deprecated) puts it there.

    The refusal's Retry-After is the time until the breaker's probe, rounded up.
    """
    url = f"redis://{HOST}:{free_port()}/0"
    store = CountingStore.from_url(url, timeout=STORE_TIMEOUT)
    clock, metrics = ManualClock(), Recorded()
    breaker = CircuitBreaker(failures=2, failure_ratio=None, cooldown=2.5, clock=clock)
    rules = RuleSet([Rule("per-ip", "5/minute")], clock=clock)
    app: Any
    if where == "limiter":
        limiter = AsyncLimiter(store, breaker=breaker)
        app = starlette_app(limiter, rules, failure_mode="closed", metrics=metrics)
    else:
        inner = Starlette(routes=[Route("/", ok)])
        with pytest.warns(DeprecationWarning, match="give the limiter its breaker"):
            app = RateLimitMiddleware(
                inner,
                limiter=AsyncLimiter(store),
                rules=rules,
                failure_mode="closed",
                breaker=breaker,
                metrics=metrics,
            )
    try:
        async with client_for(app) as client:
            first = [await client.get("/") for _ in range(2)]
            assert breaker.state == "open"
            clock.advance(1)
            later = [await client.get("/") for _ in range(3)]
    finally:
        await store.aclose()
    assert store.calls == 2
    assert [r.status_code for r in first + later] == [503] * 5
    assert [r.headers["retry-after"] for r in later] == ["2"] * 3
    assert [reason for _, _, reason in metrics.degraded_calls] == [
        "StorageUnavailableError"
    ] * 2 + ["breaker_open"] * 3


async def test_shadow_rules_never_block_even_under_the_closed_policy() -> None:
    """Only a shadow rule applies and the store is down: the request goes through."""
    store = AsyncRedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=STORE_TIMEOUT)
    metrics = Recorded()
    rules = RuleSet([Rule("dark", "5/minute", shadow=True)], clock=ManualClock())
    app = starlette_app(AsyncLimiter(store), rules, failure_mode="closed", metrics=metrics)
    try:
        async with client_for(app) as client:
            response = await client.get("/")
    finally:
        await store.aclose()
    assert response.status_code == 200
    assert metrics.degraded_calls == [("middleware", "closed", "StorageUnavailableError")]


@pytest.fixture
def stopped_redis(make_redis: Callable[..., RedisServer]) -> Iterator[RedisStore]:
    """A RedisStore whose server answered once and was then stopped."""
    server = make_redis()
    store = RedisStore.from_url(server.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.ping()
    server.stop()
    yield store
    store.close()


@pytest.mark.parametrize(("failure", "status"), [("open", 200), ("closed", 503)])
def test_wsgi_flask_with_redis_stopped_answers_by_the_policy(
    stopped_redis: RedisStore, failure: str, status: int
) -> None:
    """The WSGI twin: Flask over a stopped Redis gets 200 (open) or 503 (closed), never 500."""
    flask = Flask(__name__)
    flask.add_url_rule("/", "home", lambda: "home")
    metrics = Recorded()
    rules = RuleSet([Rule("per-ip", "5/minute")], clock=ManualClock())
    flask.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        flask.wsgi_app,
        limiter=Limiter(stopped_redis),
        rules=rules,
        failure_mode=failure,
        metrics=metrics,
    )
    response = flask.test_client().get("/")
    assert response.status_code == status
    assert not [
        name for name, _ in response.headers.items() if name.lower().startswith("ratelimit")
    ]
    if failure == "open":
        assert response.get_data() == b"home"
    else:
        assert response.headers["Retry-After"] == "1"
        assert json.loads(response.get_data())["status"] == 503
    assert metrics.degraded_calls == [("middleware", failure, "StorageUnavailableError")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failure_mode": "local"}, "TwoTier"),
        ({"failure_mode": "allow"}, "one of open, closed"),
        ({"breaker": "yes"}, "must be a CircuitBreaker"),
        ({"metrics": object()}, "must be a Metrics"),
        ({"name": ""}, "non-empty string"),
    ],
)
def test_a_bad_failure_setting_is_a_configuration_error(
    options: dict[str, Any], message: str
) -> None:
    """Each bad policy option is refused when the middleware is built, naming the option."""
    rules = RuleSet([Rule("per-ip", "5/minute")])
    with pytest.raises(ConfigurationError, match=message):
        RateLimitMiddleware(ok, limiter=AsyncLimiter(), rules=rules, **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=message):
        WSGIRateLimitMiddleware(lambda e, s: [], limiter=Limiter(), rules=rules, **options)


def test_the_breaker_deprecation_points_at_the_line_that_built_the_middleware() -> None:
    """``breaker=`` warns once per middleware, and the warning names the caller's file (the
    line that passed it), for the ASGI and the WSGI middleware alike."""
    rules = RuleSet([Rule("per-ip", "5/minute")])
    with pytest.warns(DeprecationWarning, match="give the limiter its breaker") as caught:
        RateLimitMiddleware(ok, limiter=AsyncLimiter(), rules=rules, breaker=CircuitBreaker())
        WSGIRateLimitMiddleware(
            lambda e, s: [], limiter=Limiter(), rules=rules, breaker=CircuitBreaker()
        )
    assert [warning.filename for warning in caught] == [__file__, __file__]
