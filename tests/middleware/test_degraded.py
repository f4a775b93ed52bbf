"""Decisions a failure mode made (``degraded``) pass through the middleware, headers and all."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import DecisionRecorder, ManualClock
from ratewarden.tiers import AsyncTwoTier
from tests._servers import HOST, free_port
from tests.middleware._sfv import parse_list

pytestmark = pytest.mark.timeout(30)


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


@pytest.mark.parametrize(
    ("failure", "status", "remaining"), [("open", 200, 5), ("closed", 429, 0), ("local", 200, 4)]
)
async def test_store_down_each_failure_mode_answers_through_the_middleware(
    failure: str, status: int, remaining: int
) -> None:
    """With nothing listening on the store's port, the two-tier policy decides; headers stay."""
    store = AsyncRedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=0.05)
    recorder = DecisionRecorder()
    tiers = AsyncTwoTier(store, failure_mode=failure, clock=ManualClock())
    app = Starlette(routes=[Route("/", ok)])
    ruleset = RuleSet([Rule("per-ip", "5/minute")], clock=ManualClock())
    app.add_middleware(RateLimitMiddleware, limiter=_Recording(tiers, recorder), rules=ruleset)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t"
        ) as client:
            response = await client.get("/")
    finally:
        await store.aclose()
    assert response.status_code == status
    assert parse_list(response.headers["ratelimit"])[0].params["r"] == remaining
    assert [r.decision.degraded for r in recorder.records] == [failure]


class _Recording:
    """Passes hits to the two-tier limiter and keeps each Decision it returned."""

    def __init__(self, tiers: AsyncTwoTier, recorder: DecisionRecorder) -> None:
        self.tiers = tiers
        self.recorder = recorder

    async def hit(self, key: str, rates: object, cost: int = 1, *, shadow: bool = False) -> object:
        decision = await self.tiers.hit(key, rates, cost, shadow=shadow)  # type: ignore[arg-type]
        self.recorder("gcra", key, decision)
        return decision
