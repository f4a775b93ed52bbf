"""A request that costs more than its rule can ever allow: the 429 invites no retry.

ratewarden's middleware under a real uvicorn server on loopback, with
``Rule("c", "10/minute", cost={"PUT": 20})``: a PUT can never pass. Its 429 has no
``Retry-After``, reports the true remaining (nothing was consumed) and, with the legacy
headers, no ``X-RateLimit-Reset``; the retrying clients (httpx blocking and asyncio,
requests) give up on it at once, without a wait. The clients' sleeps are recorded, not
slept. Each test has a server and a store of its own, on a ManualClock that no test moves:
what it counts is its own requests.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import requests
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.client import (
    AsyncRetryTransport,
    RetriesExhaustedError,
    RetryPolicy,
    RetryTransport,
    retry_session,
)
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet
from ratewarden.testing import ManualClock
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI

POLICY = RetryPolicy(max_attempts=5, max_wait=60)


def costly_app(served: list[str], headers: HeaderOptions) -> Starlette:
    """10 units a minute per client, on a clock that stands still; a PUT costs 20 of them,
    a GET one."""
    clock = ManualClock()

    async def item(request: Request) -> PlainTextResponse:
        served.append(request.method)
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/item", item, methods=["GET", "PUT"])])
    app.add_middleware(
        RateLimitMiddleware,
        limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)),
        rules=RuleSet(
            [Rule("c", ["10/minute", "100/hour"], cost={"PUT": 20, "*": 1})],
            headers=headers,
            clock=clock,
        ),
    )
    return app


@pytest.fixture(
    params=[
        HeaderOptions(),
        HeaderOptions(legacy=True, github=True),
        HeaderOptions(draft="draft-10", all_policies=True, legacy=True, reset="epoch"),
    ],
    ids=["draft-11", "legacy", "draft-10-all-policies"],
)
def live(request: pytest.FixtureRequest) -> Iterator[tuple[LiveASGI, list[str]]]:
    """The costly app under uvicorn, new for each test (nothing counted yet), with one of
    three header configurations."""
    served: list[str] = []
    server = LiveASGI(costly_app(served, request.param))
    yield server, served
    server.stop()


def test_the_429_reports_what_is_left_and_no_time_to_retry(
    live: tuple[LiveASGI, list[str]],
) -> None:
    """After 3 GETs, a PUT's 429: r=7 (nothing consumed), no Retry-After, no legacy reset."""
    server, _ = live
    with httpx.Client(base_url=server.url) as client:
        for _ in range(3):
            assert client.get("/item").status_code == 200
        answer = client.put("/item")
    assert answer.status_code == 429
    assert "retry-after" not in answer.headers
    assert "x-ratelimit-reset" not in answer.headers
    assert ";r=0" not in answer.headers["ratelimit"]
    assert '"c.1";r=7;' in answer.headers["ratelimit"]
    if "x-ratelimit-remaining" in answer.headers:
        assert answer.headers["x-ratelimit-remaining"] == "7"
    assert "can ever allow" in answer.json()["detail"]


def test_httpx_client_gives_up_at_once(live: tuple[LiveASGI, list[str]]) -> None:
    """RetryTransport sends the PUT once and returns its 429, having slept nothing."""
    server, served = live
    clock = RecordingClock()
    transport = RetryTransport(policy=POLICY, clock=clock, random=lambda: 0.0)
    with httpx.Client(base_url=server.url, transport=transport) as client:
        answer = client.put("/item")
    assert answer.status_code == 429
    assert clock.slept == []
    assert "PUT" not in served


async def test_async_httpx_client_gives_up_at_once(live: tuple[LiveASGI, list[str]]) -> None:
    """AsyncRetryTransport with raise_on_give_up: raises at once, saying why, no wait."""
    server, _ = live
    clock = RecordingClock()
    policy = RetryPolicy(max_attempts=5, raise_on_give_up=True)
    transport = AsyncRetryTransport(policy=policy, clock=clock, random=lambda: 0.0)
    async with httpx.AsyncClient(base_url=server.url, transport=transport) as client:
        with pytest.raises(RetriesExhaustedError, match="no retry can pass") as raised:
            await client.put("/item")
    assert raised.value.response.status_code == 429
    assert clock.slept == []


def test_requests_session_gives_up_at_once(live: tuple[LiveASGI, list[str]]) -> None:
    """retry_session: one attempt, the 429 returned, nothing slept."""
    server, _ = live
    clock = RecordingClock()
    with retry_session(POLICY, clock=clock, random=lambda: 0.0) as session:
        answer: requests.Response = session.put(f"{server.url}/item")
    assert answer.status_code == 429
    assert clock.slept == []


def test_an_exhausted_limit_still_says_when_to_retry(live: tuple[LiveASGI, list[str]]) -> None:
    """The ordinary 429 (the quota used up: 10 GETs) keeps r=0 and Retry-After, and the
    client waits."""
    server, _ = live
    with httpx.Client(base_url=server.url) as client:
        statuses = [client.get("/item").status_code for _ in range(11)]
    assert statuses == [200] * 10 + [429]
    clock = RecordingClock()
    policy = RetryPolicy(max_attempts=2)
    transport = RetryTransport(policy=policy, clock=clock, random=lambda: 0.0)
    with httpx.Client(base_url=server.url, transport=transport) as client:
        answer = client.get("/item")
    assert answer.status_code == 429
    assert "retry-after" in answer.headers
    assert ";r=0;" in answer.headers["ratelimit"]
    assert len(clock.slept) == 1
