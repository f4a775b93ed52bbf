"""A Forwarded header whose quotes do not balance cannot choose the client's identity.

A proxy (RFC 7239) adds its own ``Forwarded`` line, or appends ``, for=<client>`` to the
client's. A client that opens a quote it never closes would otherwise swallow that element
into a string of its own and be limited under an address it wrote. Real servers on
loopback: uvicorn (the lines reach the app apart) and werkzeug under Flask (joined).
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
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_client_ip,
)
from ratewarden.middleware._request import from_asgi, from_wsgi
from ratewarden.testing import ManualClock
from tests.middleware._shed_apps import wsgi_serving
from tests.middleware._uvicorn import serving

pytestmark = pytest.mark.timeout(60)

#: The client's own address as the trusted proxy on loopback saw it.
REAL = "198.51.100.20"


def _rules(clock: ManualClock) -> RuleSet:
    key = by_client_ip(["127.0.0.1"], header="forwarded")
    return RuleSet([Rule("per-ip", "2/minute", key=key)], clock=clock)


def _starlette(clock: ManualClock) -> Starlette:
    key = by_client_ip(["127.0.0.1"], header="forwarded")

    async def who(request: Request) -> Response:
        return PlainTextResponse(key(from_asgi(request.scope)))

    app = Starlette(routes=[Route("/", who)])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=_rules(clock))
    return app


def _flask(clock: ManualClock) -> Flask:
    app = Flask(__name__)
    key = by_client_ip(["127.0.0.1"], header="forwarded")

    @app.route("/")
    def who() -> str:
        return key(from_wsgi(flask_request.environ)) or ""

    limiter = Limiter(MemoryStore(clock=clock))
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=_rules(clock))  # type: ignore[method-assign]
    return app


SERVERS: dict[str, Callable[[ManualClock], AbstractContextManager[str]]] = {
    "uvicorn": lambda clock: serving(_starlette(clock)),
    "flask": lambda clock: wsgi_serving(_flask(clock)),
}


@pytest.fixture(params=sorted(SERVERS))
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with SERVERS[request.param](ManualClock(1_700_000_000.0)) as served:
        yield served


def _send(url: str, lines: list[list[tuple[str, str]]]) -> list[tuple[int, str]]:
    with httpx.Client(base_url=url, timeout=5) as client:
        answers = [client.get("/", headers=headers) for headers in lines]
    return [(a.status_code, a.text if a.status_code == 200 else "") for a in answers]


def test_an_unclosed_quote_on_a_line_of_its_own_does_not_hide_the_proxys_line(url: str) -> None:
    """``Forwarded: for=6.6.6.<i>;x="`` before the proxy's ``Forwarded: for=<client>`` line:
    rotating the forged address no longer gives a fresh identity each time. The walk ends
    at the trusted peer, whom every such request shares; the proxy's element is read as
    before when the client sends nothing."""
    forged = [[("Forwarded", f'for=6.6.6.{i};x="'), ("Forwarded", f"for={REAL}")] for i in range(6)]
    honest = [[("Forwarded", f"for={REAL}")]] * 3
    found = _send(url, forged + honest)
    assert found == [(200, "ip:127.0.0.1")] * 2 + [(429, "")] * 4 + [
        (200, f"ip:{REAL}"),
        (200, f"ip:{REAL}"),
        (429, ""),
    ]


def test_an_unclosed_quote_before_the_appended_element_does_not_swallow_it(url: str) -> None:
    """``Forwarded: for=6.6.6.<i>;x=", for=<client>``: one line, the proxy's element appended
    after the client's quote. Limited as the trusted peer, never as 6.6.6.<i>."""
    forged = [[("Forwarded", f'for=6.6.6.{i};x=", for={REAL}')] for i in range(5)]
    assert _send(url, forged) == [(200, "ip:127.0.0.1")] * 2 + [(429, "")] * 3


@pytest.mark.parametrize(
    "element",
    [
        'for=6.6.6.6;x="a"b',  # a quote inside a value
        "for=6.6.6.6;for=6.6.6.7",  # for given twice
        "for=6.6.6.6;secret",  # a parameter without =
    ],
)
def test_an_element_that_does_not_parse_ends_the_walk(element: str, url: str) -> None:
    """The rightmost element does not parse: the walk ends at the trusted peer, as at an
    ``unknown`` hop, rather than reading a ``for=`` out of it."""
    assert _send(url, [[("Forwarded", element)]]) == [(200, "ip:127.0.0.1")]
