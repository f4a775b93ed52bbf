"""``methods="GET"`` selects HEAD too: Starlette and Flask run the GET view for a HEAD.

A rule, or a middleware's ``methods``, that named GET alone let HEAD requests run the view
unlimited. HEAD now counts with GET, and in a per-method cost table it costs what GET does
unless it has an entry of its own. Real servers on loopback: uvicorn and werkzeug's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest
from flask import Flask
from flask import request as flask_request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.budgets import LoadShedder
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    SheddingMiddleware,
    WSGIRateLimitMiddleware,
    WSGISheddingMiddleware,
)
from ratewarden.testing import ManualClock
from tests.middleware._shed_apps import wsgi_serving
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)


def _rules(clock: ManualClock) -> RuleSet:
    return RuleSet(
        [
            Rule("export", "1/minute", paths=["/export"], methods="GET"),
            Rule("report", "3/minute", paths=["/report"], cost={"GET": 2}),
            Rule("peek", "1/minute", paths=["/peek"], cost={"GET": 1, "HEAD": 0}),
        ],
        clock=clock,
    )


def _starlette(clock: ManualClock, ran: list[str]) -> Starlette:
    async def view(request: Request) -> Response:
        ran.append(f"{request.method} {request.url.path}")
        return PlainTextResponse("data")

    paths = ("/export", "/report", "/peek", "/shed")
    app = Starlette(routes=[Route(p, view, methods=["GET"]) for p in paths])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=_rules(clock))
    shedder = LoadShedder(lambda: 1.0)
    app.add_middleware(SheddingMiddleware, shedder=shedder, paths="/shed", methods="GET")
    return app


def _flask(clock: ManualClock, ran: list[str]) -> Flask:
    app = Flask(__name__)

    def view() -> str:
        ran.append(f"{flask_request.method} {flask_request.path}")
        return "data"

    for path in ("/export", "/report", "/peek", "/shed"):
        app.add_url_rule(path, path, view, methods=["GET"])
    limiter = Limiter(MemoryStore(clock=clock))
    limited = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=_rules(clock))
    shedder = LoadShedder(lambda: 1.0)
    app.wsgi_app = WSGISheddingMiddleware(  # type: ignore[method-assign]
        limited, shedder=shedder, paths="/shed", methods="GET"
    )
    return app


SERVERS: dict[str, Callable[[ManualClock, list[str]], AbstractContextManager[str]]] = {
    "starlette": lambda clock, ran: serving(_starlette(clock, ran)),
    "flask": lambda clock, ran: wsgi_serving(_flask(clock, ran)),
}


@pytest.fixture(params=sorted(SERVERS))
def served(request: pytest.FixtureRequest) -> Iterator[tuple[httpx.Client, list[str]]]:
    ran: list[str] = []
    with (
        SERVERS[request.param](ManualClock(1_700_000_000.0), ran) as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        yield client, ran


def test_a_get_rule_limits_head_with_get(served: tuple[httpx.Client, list[str]]) -> None:
    """``methods="GET"`` of 1/minute: a HEAD takes the one request, and the GET and HEAD
    after it are refused; the view ran once, for the HEAD."""
    client, ran = served
    codes = [client.request(m, "/export").status_code for m in ("HEAD", "GET", "HEAD")]
    assert codes == [200, 429, 429]
    assert ran == ["HEAD /export"]


def test_head_costs_what_get_does_unless_priced_itself(
    served: tuple[httpx.Client, list[str]],
) -> None:
    """``cost={"GET": 2}`` on 3/minute: a HEAD costs 2, so the second is refused (it cost the
    default 1 before). ``{"GET": 1, "HEAD": 0}`` on 1/minute: HEADs consume nothing, and the
    one GET still fits after two of them."""
    client, _ = served
    assert [client.head("/report").status_code for _ in range(2)] == [200, 429]
    peeks = [client.request(m, "/peek").status_code for m in ("HEAD", "HEAD", "GET", "GET")]
    assert peeks == [200, 200, 200, 429]


def test_a_get_only_load_shedder_sheds_head_too(served: tuple[httpx.Client, list[str]]) -> None:
    """``SheddingMiddleware(methods="GET")`` at full load refuses a HEAD as it does a GET."""
    client, ran = served
    assert [client.request(m, "/shed").status_code for m in ("GET", "HEAD")] == [503, 503]
    assert ran == []
