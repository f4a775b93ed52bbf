"""A login rule (``2/second``) behind the middleware with a ``HotKeyLimiter`` that detects hot
keys onto 3 cells: an attacker hammering one account turns its key hot, and the key, which 3
cells cannot split, stays on its own state. Every request is answered 200 or 429, exactly as
without the hot-key limiter; before, every request after detection raised a
``ConfigurationError`` into the app (a 500). Flask behind the WSGI middleware and Starlette
behind the ASGI one, on the 3-primary Cluster, in ManualClock time."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden import Limiter
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests.middleware._helpers import client_for, ok

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

RULES = [Rule("login", "2/second", key=by_api_key())]
#: 200 requests, 5 ms apart: 200/s at the detector, far over its 50/s.
REQUESTS, STEP = 200, 0.005
#: What the rule alone answers to them: 2 at once, and 1 a half-second refilled (3 over 1 s).
EXPECTED = Counter({200: 3, 429: 197})


def flask_app(limiter: Any, clock: ManualClock) -> Any:
    app = Flask(__name__)
    app.add_url_rule("/login", "login", lambda: "ok")
    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=limiter, rules=RuleSet(RULES, clock=clock)
    )
    return app.test_client()


def test_flask_answers_a_detected_login_key_as_the_rule_alone_does(
    cluster_client: redis.RedisCluster,
) -> None:
    """200 requests of one API key: 3 answered 200 and 197 429, with and without the hot-key
    limiter (the plain run on a fresh account); no exception reaches Flask."""
    clock = ManualClock()
    store = RedisStore(cluster_client, clock=clock, timeout=1.0)
    detector = HotKeyDetector(50, clock=clock)
    hot = HotKeyLimiter(store, CellLimiter(store, 3), detector=detector, clock=clock)
    client, plain = flask_app(hot, clock), flask_app(Limiter(store), clock)
    codes, plain_codes = Counter[int](), Counter[int]()
    for _ in range(REQUESTS):
        codes[client.get("/login", headers={"X-Api-Key": "alice"}).status_code] += 1
        plain_codes[plain.get("/login", headers={"X-Api-Key": "bob"}).status_code] += 1
        clock.advance(STEP)
    assert len(detector.hot()) == 1  # alice's key, detected hot
    assert codes == plain_codes == EXPECTED


async def test_starlette_answers_a_detected_login_key_as_the_rule_alone_does(
    async_client: aredis.RedisCluster,
) -> None:
    """The same through RateLimitMiddleware and an AsyncHotKeyLimiter: 3 200s, 197 429s, and
    no 500 (the client turns an exception out of the app into one)."""
    clock = ManualClock()
    store = AsyncRedisStore(async_client, clock=clock, timeout=1.0)
    detector = HotKeyDetector(50, clock=clock)
    limiter = AsyncHotKeyLimiter(store, AsyncCellLimiter(store, 3), detector=detector, clock=clock)
    app = RateLimitMiddleware(
        Starlette(routes=[Route("/login", ok)]), limiter=limiter, rules=RuleSet(RULES, clock=clock)
    )
    codes = Counter[int]()
    async with client_for(app) as client:
        for _ in range(REQUESTS):
            answer = await client.get("/login", headers={"X-Api-Key": "alice"})
            codes[answer.status_code] += 1
            clock.advance(STEP)
    assert codes == EXPECTED
