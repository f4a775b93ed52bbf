"""A jitter source that returns a value outside [0, 1), or no number, never makes a 500.

``HeaderOptions(random=...)`` raised ConfigurationError while a denial was rendered, so
every 429 of the rule became Starlette's 500 without RateLimit headers. The draw is now
clamped to [0, 1] (a non-number or NaN counts as 0), as the retrying client does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet
from ratewarden.testing import ManualClock
from tests.middleware._helpers import ok


@pytest.mark.parametrize(
    ("draw", "retry_after"),
    [
        (lambda: 1.0, "11"),  # the top of the range: the whole jitter
        (lambda: 7.5, "11"),  # above: clamped to the whole jitter
        (lambda: -3.0, "6"),  # below: no jitter
        (lambda: math.nan, "6"),
        (lambda: "0.5", "6"),  # no number: no jitter
        (lambda: None, "6"),
    ],
)
async def test_a_bad_draw_still_answers_429_with_a_bounded_retry_after(
    draw: Callable[[], object], retry_after: str
) -> None:
    """10/minute spent in one instant: Retry-After is 6 s plus at most the 5 s of jitter."""
    clock = ManualClock(1_700_000_000)
    options = HeaderOptions(retry_jitter=5, random=draw)  # type: ignore[arg-type]
    app = Starlette(routes=[Route("/", ok)])
    rules = RuleSet([Rule("c", "10/minute")], headers=options, clock=clock)
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=rules)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        for _ in range(10):
            assert (await client.get("/")).status_code == 200
        denied = await client.get("/")
    assert denied.status_code == 429
    assert denied.headers["retry-after"] == retry_after
    assert denied.json()["retry_after"] == int(retry_after)
    assert "ratelimit" in denied.headers
