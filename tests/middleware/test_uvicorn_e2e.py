"""End to end: a Starlette app behind the middleware, served by a real uvicorn on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    by_api_key,
    by_client_ip,
)
from ratewarden.testing import ManualClock
from tests.middleware._sfv import parse_list
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)


async def orders(request: Request) -> Response:
    return JSONResponse({"method": request.method})


def _app(ruleset: RuleSet, clock: ManualClock) -> Starlette:
    app = Starlette(routes=[Route("/orders", orders, methods=["GET", "HEAD", "POST"])])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=ruleset)
    return app


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000.25)


@pytest.fixture
def layered(clock: ManualClock) -> Iterator[str]:
    """Per-IP backstop 8/minute and a per-key contract of 10/minute where a POST costs 5."""
    ruleset = RuleSet(
        [
            Rule("per-ip", "8/minute"),
            Rule("contract", "10/minute", key=by_api_key(), cost={"GET": 1, "POST": 5}),
        ],
        clock=clock,
        headers=HeaderOptions(legacy=True, github=True, reset="epoch", partition_key=True),
    )
    with serving(_app(ruleset, clock)) as url:
        yield url


def test_headers_on_the_wire_parse_as_structured_fields(layered: str) -> None:
    """Every RateLimit header uvicorn sends parses strictly, with the numbers configured."""
    with httpx.Client(base_url=layered, timeout=5) as client:
        response = client.get("/orders", headers={"x-api-key": "alpha"})
    assert response.status_code == 200
    (policy,) = parse_list(response.headers["ratelimit-policy"])
    (state,) = parse_list(response.headers["ratelimit"])
    assert policy.value == state.value == "per-ip"
    assert (policy.params["q"], policy.params["w"]) == (8, 60)
    assert (state.params["r"], state.params["t"]) == (7, 8)
    assert isinstance(policy.params["pk"], bytes) and policy.params["pk"] == state.params["pk"]
    assert response.headers["x-ratelimit-resource"] == "per-ip"
    assert response.headers["x-ratelimit-reset"] == str(1_700_000_000 + 8)


def test_retry_after_is_right_to_the_second(layered: str, clock: ManualClock) -> None:
    """Retry-After is the exact wait rounded up; one microsecond early is still refused."""
    with httpx.Client(base_url=layered, timeout=5) as client:
        key = {"x-api-key": "beta"}
        for _ in range(2):
            assert client.post("/orders", headers=key).status_code == 200
        clock.advance(7.5)
        denied = client.post("/orders", headers=key)
        # The contract is full until 2 * 30 s = 60 s after the first POST; a POST
        # needs 5 units = 30 s of refill: 30 - 7.5 = 22.5 s, sent as 23.
        assert denied.status_code == 429
        assert denied.headers["retry-after"] == "23"
        assert json.loads(denied.content)["retry_after"] == 23
        clock.advance(22.5 - 0.000_001)
        early = client.post("/orders", headers=key)
        assert early.status_code == 429 and early.headers["retry-after"] == "1"
        clock.advance(0.000_001)
        assert client.post("/orders", headers=key).status_code == 200


def test_layered_limits_and_costs_as_configured(layered: str) -> None:
    """Writes cost 5 of the key's 10; the per-IP backstop of 8 stops a second key too."""
    with httpx.Client(base_url=layered, timeout=5) as client:
        gamma = {"x-api-key": "gamma"}
        codes = [client.post("/orders", headers=gamma).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        contract = parse_list(client.get("/orders", headers=gamma).headers["ratelimit"])[0]
        assert contract.value == "contract" and contract.params["r"] == 0
        delta = {"x-api-key": "delta"}
        codes = [client.get("/orders", headers=delta).status_code for _ in range(5)]
        # per-ip has counted 3 + 1 requests from this address: 4 more fit.
        assert codes == [200, 200, 200, 200, 429]
        last = client.get("/orders", headers=delta)
        assert parse_list(last.headers["ratelimit"])[0].value == "per-ip"


@pytest.mark.parametrize(
    ("trusted", "expected"),
    [((), [200, 200, 200, 429, 429, 429]), (("127.0.0.1",), [200] * 6)],
)
def test_forged_x_forwarded_for_from_an_untrusted_peer_is_limited_by_the_peer(
    clock: ManualClock, trusted: tuple[str, ...], expected: list[int]
) -> None:
    """Rotating forged X-Forwarded-For values help only when the peer is a trusted proxy."""
    ruleset = RuleSet(
        [Rule("per-client", "3/minute")], clock=clock, default_key=by_client_ip(trusted)
    )
    with serving(_app(ruleset, clock)) as url, httpx.Client(base_url=url, timeout=5) as client:
        codes = [
            client.get("/orders", headers={"x-forwarded-for": f"203.0.113.{i}"}).status_code
            for i in range(6)
        ]
    assert codes == expected


def test_head_request_over_the_limit_gets_429_headers_without_a_body(clock: ManualClock) -> None:
    """A HEAD answered 429 carries Retry-After and the RateLimit headers, and no body."""
    ruleset = RuleSet([Rule("per-client", "1/minute")], clock=clock)
    with serving(_app(ruleset, clock)) as url, httpx.Client(base_url=url, timeout=5) as client:
        assert client.get("/orders").status_code == 200
        head = client.head("/orders")
    assert head.status_code == 429
    assert head.headers["retry-after"] == "60"
    assert head.content == b""
