"""A 429 that no wait can help says so even when the key is already spent.

"No ``Retry-After`` and no policy at ``r=0``" is the signal that a request costs more than a
rule can ever allow. ``r`` was the key's true remaining, 0 on a spent key, which is the
"wait ``t``" signal: ratewarden's client waited and sent the impossible request again. Now
such a denial shows every policy at ``r`` >= 1, whatever the key's state, and the client
gives up at once. Real Starlette app, real middleware, the project's retrying client; time
is a ManualClock and the client's sleeps are recorded, not slept.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.client import AsyncRetryTransport, RetriesExhaustedError, RetryPolicy
from ratewarden.client._hints import no_wait_helps, retry_hint
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet, by_api_key
from tests.client._fakes import RecordingClock
from tests.middleware._sfv import parse_list

OPTIONS = [
    HeaderOptions(),
    HeaderOptions(all_policies=True),
    HeaderOptions(legacy=True, github=True),
    HeaderOptions(draft="draft-10", all_policies=True, legacy=True, reset="epoch"),
]
CASES = [
    # (rates, algorithm, hits of cost 1 first, the impossible cost)
    ("10/minute", "gcra", 10, 20),
    ("10/second; 30/minute", "fixed_window", 10, 15),
    ("10/second; 30/minute", "gcra", 10, 15),
]


def _app(rates: str, algorithm: str, options: HeaderOptions, clock: RecordingClock) -> Any:
    async def item(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    def cost(request: Any) -> int:
        return int(request.headers.get("x-cost", "1"))

    app = Starlette(routes=[Route("/item", item)])
    rules = RuleSet([Rule("c", rates, cost=cost, key=by_api_key())], headers=options, clock=clock)
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock), algorithm=algorithm)
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=rules)
    return app


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize(("rates", "algorithm", "hits", "cost"), CASES)
async def test_the_client_gives_up_on_a_spent_key_without_a_wait(
    options: HeaderOptions, rates: str, algorithm: str, hits: int, cost: int
) -> None:
    """The key spent by cost-1 requests, then one costing more than a rate can hold: no
    Retry-After, no policy at r=0, and the retrying client raises at once, having slept
    nothing and sent it once."""
    clock = RecordingClock()
    app = _app(rates, algorithm, options, clock)
    inner = httpx.ASGITransport(app=app)
    key = {"x-api-key": "k1"}
    async with httpx.AsyncClient(transport=inner, base_url="http://t") as plain:
        for _ in range(hits):
            assert (await plain.get("/item", headers=key)).status_code == 200
        direct = await plain.get("/item", headers={**key, "x-cost": str(cost)})
    assert direct.status_code == 429 and "retry-after" not in direct.headers
    assert "can ever allow" in direct.json()["detail"]
    items = parse_list(direct.headers["ratelimit"])
    assert all(item.params["r"] >= 1 for item in items), direct.headers["ratelimit"]
    if options.legacy:
        assert "x-ratelimit-reset" not in direct.headers
    assert retry_hint(direct.headers, clock.now()) is None
    assert no_wait_helps(direct.headers)

    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request.headers.get("x-cost", "1"))

    policy = RetryPolicy(max_attempts=5, max_wait=60, raise_on_give_up=True)
    retrying = AsyncRetryTransport(inner, policy=policy, clock=clock, random=lambda: 0.0)
    async with httpx.AsyncClient(
        transport=retrying, base_url="http://t", event_hooks={"request": [count]}
    ) as client:
        with pytest.raises(RetriesExhaustedError, match="no retry can pass"):
            await client.get("/item", headers={**key, "x-cost": str(cost)})
    assert clock.slept == [] and sent == [str(cost)]


async def test_a_spent_key_still_asks_a_cost_one_request_to_wait() -> None:
    """The ordinary denial is unchanged: r=0 with Retry-After on the spent key."""
    clock = RecordingClock()
    app = _app("10/minute", "gcra", HeaderOptions(), clock)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as plain:
        for _ in range(10):
            await plain.get("/item", headers={"x-api-key": "k1"})
        denied = await plain.get("/item", headers={"x-api-key": "k1"})
    assert denied.status_code == 429 and denied.headers["retry-after"] == "6"
    assert parse_list(denied.headers["ratelimit"])[0].params["r"] == 0
