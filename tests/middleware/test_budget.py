"""Token budgets from the ASGI middleware, on a FastAPI app, on memory and on Redis."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ratewarden import AsyncMemoryStore, ConfigurationError
from ratewarden.budgets import AsyncTokenBudget, Usage
from ratewarden.middleware import RequestInfo, by_api_key
from ratewarden.middleware.budget import TokenBudgetMiddleware
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.middleware._helpers import http_scope

pytestmark = pytest.mark.timeout(60)

LIMITS = {"requests": "100/minute", "tokens": "10000/minute"}
KEY = {"x-api-key": "tenant-a"}


@dataclass
class Served:
    """The app, its budget and how often the model endpoint actually ran."""

    app: FastAPI
    budget: AsyncTokenBudget
    calls: list[str]

    def client(self) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app)
        return httpx.AsyncClient(transport=transport, base_url="http://t")

    async def tokens_left(self) -> int:
        return (
            (await self.budget.peek("budget:key:" + _hashed("tenant-a"))).axis("tokens").remaining
        )


def _hashed(api_key: str) -> str:
    found = by_api_key()(RequestInfo("GET", "/", None, {"x-api-key": api_key}, {}))
    assert found is not None
    return found.removeprefix("key:")


def _estimate(request: RequestInfo, body: bytes) -> Usage:
    asked = json.loads(body)
    return Usage.of(asked["prompt_tokens"], asked["max_tokens"])


def _app(budget: AsyncTokenBudget, **options: object) -> Served:
    app = FastAPI()
    calls: list[str] = []

    @app.post("/v1/chat")
    async def chat(request: Request) -> JSONResponse:
        asked = await request.json()
        calls.append("chat")
        used = asked["prompt_tokens"] + asked["reply_tokens"]
        headers = {} if asked.get("silent") else {"x-tokens-used": str(asked.get("report", used))}
        return JSONResponse({"usage": {"total_tokens": used}}, headers=headers)

    @app.post("/v1/stream")
    async def stream(request: Request) -> StreamingResponse:
        asked = await request.json()
        calls.append("stream")

        async def tokens() -> AsyncIterator[bytes]:
            for _ in range(asked["reply_tokens"] // 100):
                yield b"tok "
            request.state.tokens_used = asked["prompt_tokens"] + asked["reply_tokens"]

        return StreamingResponse(tokens())

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"ok": "yes"}

    app.add_middleware(
        TokenBudgetMiddleware,
        budget=budget,
        key=by_api_key(),
        estimate=_estimate,
        read_body=True,
        paths=["/v1/**"],
        **options,
    )
    return Served(app, budget, calls)


@pytest.fixture(params=["memory", "redis"])
async def budget(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[AsyncTokenBudget]:
    """10,000 tokens/min on the memory store or a real redis-server, under a ManualClock."""
    clock = ManualClock()
    if request.param == "memory":
        yield AsyncTokenBudget(AsyncMemoryStore(clock=clock), LIMITS, max_output_tokens=4000)
        return
    redis_server.client().flushall()
    store = AsyncRedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    try:
        yield AsyncTokenBudget(store, LIMITS, max_output_tokens=4000)
    finally:
        await store.aclose()


def _ask(prompt: int, max_tokens: int, reply: int, **extra: object) -> dict[str, object]:
    return {"prompt_tokens": prompt, "max_tokens": max_tokens, "reply_tokens": reply, **extra}


async def test_reserve_4000_settle_at_1500_leaves_8500(budget: AsyncTokenBudget) -> None:
    """The issue's worked example through HTTP: the response reports 1,500 of 4,000 reserved."""
    served = _app(budget)
    async with served.client() as client:
        response = await client.post("/v1/chat", json=_ask(1000, 3000, 500), headers=KEY)
    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-tokens"] == "10000"
    assert response.headers["x-ratelimit-remaining-tokens"] == "8500"
    assert response.headers["x-ratelimit-remaining-requests"] == "99"
    assert '"tokens";q=10000;w=60;qu="tokens"' in response.headers["ratelimit-policy"]
    assert await served.tokens_left() == 8500


async def test_a_request_the_budget_cannot_hold_is_refused_before_the_app(
    budget: AsyncTokenBudget,
) -> None:
    """After 9,000 of 10,000 tokens, a 4,000-token estimate gets a 429 and the model never runs."""
    served = _app(budget)
    async with served.client() as client:
        first = await client.post("/v1/chat", json=_ask(5000, 4000, 4000), headers=KEY)
        refused = await client.post("/v1/chat", json=_ask(1000, 3000, 10), headers=KEY)
    assert first.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert refused.status_code == 429
    assert served.calls == ["chat"]
    assert refused.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert int(refused.headers["retry-after"]) >= 18  # 3,000 tokens at 10,000/min
    assert refused.headers["cache-control"] == "no-store"
    assert json.loads(refused.content)["status"] == 429
    assert await served.tokens_left() == 1000


async def test_a_stream_settles_from_request_state_after_its_last_chunk(
    budget: AsyncTokenBudget,
) -> None:
    """``actual`` reads what the stream recorded at its end; the refund follows the last chunk."""

    def actual(request: RequestInfo, headers: Sequence[tuple[bytes, bytes]]) -> int | None:
        state = request.raw.get("state", {})
        used = state.get("tokens_used")
        return used if isinstance(used, int) else None

    served = _app(budget, actual=actual)
    async with served.client() as client:
        response = await client.post("/v1/stream", json=_ask(200, 3800, 300), headers=KEY)
    assert response.text == "tok tok tok "
    # The headers went out with the stream's start: the reservation's view.
    assert response.headers["x-ratelimit-remaining-tokens"] == "6000"
    assert await served.tokens_left() == 9500


async def test_without_a_usage_report_the_estimate_stands(
    budget: AsyncTokenBudget, caplog: pytest.LogCaptureFixture
) -> None:
    """No header, or a malformed one, refunds nothing (and the malformed one is logged)."""
    served = _app(budget)
    async with served.client() as client:
        await client.post("/v1/chat", json=_ask(500, 1500, 10, silent=True), headers=KEY)
        assert await served.tokens_left() == 8000
        with caplog.at_level(logging.WARNING, logger="ratewarden.middleware"):
            await client.post("/v1/chat", json=_ask(500, 1500, 10, report="lots"), headers=KEY)
    assert await served.tokens_left() == 6000
    assert "not a whole number" in caplog.text


async def test_unselected_paths_and_oversized_bodies(budget: AsyncTokenBudget) -> None:
    """Paths outside ``paths`` are not budgeted; a body over ``max_body`` is a 413."""
    served = _app(budget, max_body=64)
    async with served.client() as client:
        health = await client.get("/health", headers=KEY)
        large = await client.post("/v1/chat", json=_ask(1, 1, 1, pad="x" * 100), headers=KEY)
    assert health.status_code == 200
    assert "x-ratelimit-remaining-tokens" not in health.headers
    assert large.status_code == 413
    assert served.calls == []
    assert await served.tokens_left() == 10000


async def test_concurrent_requests_never_overcommit(budget: AsyncTokenBudget) -> None:
    """Twenty requests of 1,000 at once: ten are admitted, whatever the interleaving."""
    served = _app(budget)
    async with served.client() as client:
        responses = await asyncio.gather(
            *(client.post("/v1/chat", json=_ask(500, 500, 500), headers=KEY) for _ in range(20))
        )
    assert sorted(r.status_code for r in responses) == [200] * 10 + [429] * 10


def test_bad_options_are_configuration_errors() -> None:
    """A budget that is not an AsyncTokenBudget, or a bad max_body, is refused when built."""
    budget = AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=10)
    with pytest.raises(ConfigurationError, match="AsyncTokenBudget"):
        TokenBudgetMiddleware(FastAPI(), budget=object(), estimate=_estimate)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_body"):
        TokenBudgetMiddleware(FastAPI(), budget=budget, estimate=_estimate, max_body=-1)
    with pytest.raises(ConfigurationError, match="estimate"):
        TokenBudgetMiddleware(FastAPI(), budget=budget, estimate=3)  # type: ignore[arg-type]


async def test_an_estimate_that_is_not_a_count_names_itself() -> None:
    """An estimate callable returning nonsense raises a ConfigurationError saying so."""
    budget = AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=10)
    app = FastAPI()
    app.add_middleware(TokenBudgetMiddleware, budget=budget, estimate=lambda request, body: "many")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with pytest.raises(ConfigurationError, match="estimate returned 'many'"):
            await client.get("/")


async def test_a_client_gone_before_its_body_ends_is_neither_charged_nor_answered(
    budget: AsyncTokenBudget,
) -> None:
    """A disconnect while the body is read: nothing reserved, nothing sent, the app not called."""
    served = _app(budget)
    messages = [
        {"type": "http.request", "body": b'{"prompt_tokens": 10', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return messages.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    headers = [(b"x-api-key", b"tenant-a")]
    scope = http_scope(
        "POST", "/v1/chat", headers, client=("127.0.0.1", 5000), server=("127.0.0.1", 80)
    )
    await served.app(scope, receive, send)
    assert sent == []
    assert served.calls == []
    assert await served.tokens_left() == 10000
