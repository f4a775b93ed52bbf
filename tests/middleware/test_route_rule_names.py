"""``@exempt`` and ``@override`` must name rules of the RuleSet, in real Flask and Starlette apps.

A typo there (``@exempt("per_ip")`` for ``per-ip``) would leave the rule applied, or the cost
unchanged, without a word. The resolvers list every decorated route of the app, and the rule
set checks them all at the first request, whichever route it asks for: every request is
refused with a ConfigurationError naming the unknown rule, the route and the rules there are,
and no budget is spent, until the decorator is fixed. Before, only requests to that route were
refused, and only once it was called (a health check with a typo failed every time it was
probed, and nothing else told).
"""

from __future__ import annotations

import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    exempt,
    flask_endpoint,
    override,
)
from ratewarden.testing import ManualClock
from tests.middleware._helpers import peer_client

#: The rules of every app here: one request an hour, so a spent unit shows.
RULES = [Rule("per-ip", "1/hour"), Rule("contract", "1/hour")]

EXEMPT_ERROR = (
    r"@exempt\('per_ip'\) on /open names no rule of the RuleSet; "
    r"its rules: \['contract', 'per-ip'\]"
)
OVERRIDE_ERROR = (
    r"@override\('contrat'\) on /bulk names no rule of the RuleSet; "
    r"its rules: \['contract', 'per-ip'\]"
)


def _flask(clock: ManualClock, mistake: str = "") -> Flask:
    app = Flask(__name__)

    @app.route("/")
    def home() -> str:
        return "home"

    if mistake == "/open":

        @app.route("/open")
        @exempt("per_ip")
        def open_view() -> str:
            return "open"

    if mistake == "/bulk":

        @app.route("/bulk")
        @override("contrat", cost=10)
        def bulk() -> str:
            return "bulk"

    @app.route("/fine")
    @exempt("per-ip")
    @override("contract", cost=1)
    def fine() -> str:
        return "fine"

    ruleset = RuleSet(RULES, clock=clock, resolver=flask_endpoint(app))
    limiter = Limiter(MemoryStore(clock=clock))
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=ruleset)  # type: ignore[method-assign]
    return app


@exempt("per_ip")
async def open_endpoint(request: Request) -> Response:
    return PlainTextResponse("open")


@override("contrat", cost=10)
async def bulk_endpoint(request: Request) -> Response:
    return PlainTextResponse("bulk")


@exempt("per-ip")
@override("contract", cost=1)
async def fine_endpoint(request: Request) -> Response:
    return PlainTextResponse("fine")


async def home_endpoint(request: Request) -> Response:
    return PlainTextResponse("home")


def _starlette(clock: ManualClock, mistake: str = "") -> Starlette:
    mistakes = {"/open": open_endpoint, "/bulk": bulk_endpoint}
    routes = [Route("/", home_endpoint), Route("/fine", fine_endpoint)]
    if mistake:
        routes.append(Route(mistake, mistakes[mistake]))
    app = Starlette(routes=routes)
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=RuleSet(RULES, clock=clock))
    return app


@pytest.mark.parametrize(
    ("path", "message"),
    [("/open", EXEMPT_ERROR), ("/bulk", OVERRIDE_ERROR)],
    ids=["exempt", "override"],
)
def test_flask_route_naming_an_unknown_rule_refuses_every_request(path: str, message: str) -> None:
    """Flask: @exempt("per_ip") and @override("contrat") are refused at the first request,
    to another route, naming the rule, the route and the known rules; again at the next."""
    client = _flask(ManualClock(), path).test_client()
    for asked in ("/", "/fine", path):
        with pytest.raises(ConfigurationError, match=message):
            client.get(asked)


def test_flask_routes_naming_known_rules_still_work() -> None:
    """Flask: a route that exempts and overrides rules the RuleSet has is served as before."""
    client = _flask(ManualClock()).test_client()
    assert client.get("/fine").status_code == 200
    assert client.get("/fine").status_code == 429


@pytest.mark.parametrize(
    ("path", "message"),
    [("/open", EXEMPT_ERROR), ("/bulk", OVERRIDE_ERROR)],
    ids=["exempt", "override"],
)
async def test_starlette_route_naming_an_unknown_rule_refuses_every_request(
    path: str, message: str
) -> None:
    """Starlette: the same refusal, with the same message, at whichever route is asked."""
    async with peer_client(_starlette(ManualClock(), path)) as client:
        for asked in ("/", "/fine", path):
            with pytest.raises(ConfigurationError, match=message):
                await client.get(asked)


async def test_starlette_routes_naming_known_rules_still_work() -> None:
    """Starlette: a route that exempts and overrides rules the RuleSet has is served."""
    async with peer_client(_starlette(ManualClock())) as client:
        assert (await client.get("/fine")).status_code == 200
        assert (await client.get("/fine")).status_code == 429
