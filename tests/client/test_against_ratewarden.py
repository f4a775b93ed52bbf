"""The client against ratewarden's own rate limiting middleware, sharing one ManualClock.

When the client "sleeps", the clock the limiter reads moves too, so the whole loop
(429 with Retry-After and RateLimit, wait, retry, allowed) runs at once and exactly.
"""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.client import AsyncRetryTransport, retry_hint
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet
from tests.client._fakes import RecordingClock


def limited_app(clock: RecordingClock, served: list[int]) -> Starlette:
    """A Starlette app limited to 2 requests per second per client address."""

    async def orders(request: Request) -> PlainTextResponse:
        served.append(1)
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/orders", orders)])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(
        RateLimitMiddleware,
        limiter=limiter,
        rules=RuleSet([Rule("per-ip", "2/second")], clock=clock),
    )
    return app


async def test_client_waits_exactly_as_long_as_ratewarden_asks() -> None:
    """The third request in a second is throttled; the client waits the hint and gets through."""
    clock, served = RecordingClock(), []
    transport = AsyncRetryTransport(
        httpx.ASGITransport(limited_app(clock, served)), clock=clock, random=lambda: 0.0
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        statuses = [(await client.get("/orders")).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert served == [1, 1, 1]
    assert clock.slept == [1.0]


async def test_ratewardens_429_headers_read_as_the_same_hint() -> None:
    """Retry-After and the RateLimit field of a ratewarden 429 both ask for the same wait."""
    clock = RecordingClock()
    app = limited_app(clock, [])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://test"
    ) as client:
        for _ in range(2):
            await client.get("/orders")
        denied = await client.get("/orders")
    assert denied.status_code == 429
    from_retry_after = retry_hint({"Retry-After": denied.headers["retry-after"]}, clock.now())
    from_field = retry_hint({"RateLimit": denied.headers["ratelimit"]}, clock.now())
    assert from_retry_after == from_field == 1.0


def without_retry_after(app: Starlette) -> object:
    """``app`` with Retry-After taken off its responses: only the RateLimit field is left."""

    async def stripped(scope: Any, receive: Any, send: Any) -> None:
        async def send_without(message: Any) -> None:
            if message["type"] == "http.response.start":
                kept = [(n, v) for n, v in message["headers"] if n.lower() != b"retry-after"]
                message = {**message, "headers": kept}
            await send(message)

        await app(scope, receive, send_without)

    return stripped


async def test_with_only_the_ratelimit_field_the_client_waits_exactly_t() -> None:
    """3/minute (GCRA): the 4th request is throttled with t=20, the next unit's return (draft-11's
    effective window); with no Retry-After the client sleeps exactly that (not the 60 s until the
    quota is whole) and the retry gets through."""
    clock, served = RecordingClock(), []

    async def orders(request: Request) -> PlainTextResponse:
        served.append(1)
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/orders", orders)])
    app.add_middleware(
        RateLimitMiddleware,
        limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)),
        rules=RuleSet([Rule("per-ip", "3/minute")], clock=clock),
    )
    transport = AsyncRetryTransport(
        httpx.ASGITransport(without_retry_after(app)),  # type: ignore[arg-type]
        clock=clock,
        random=lambda: 0.0,
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        statuses = [(await client.get("/orders")).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 200]
    assert served == [1, 1, 1, 1]
    assert clock.slept == [20.0]
