"""The mistakes a user makes first with the middleware's functions are ConfigurationErrors
that say what to write: a method name one letter off, a header name in another case, a
trusted network that is every address, a misspelt or missing keyword, a middleware without
its rules. Each was accepted without a word, refused for its case, or a bare TypeError."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Route
from werkzeug.test import Client as WerkzeugClient

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
    by_client_ip,
    limit,
    override,
)
from tests.middleware._helpers import ok


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Rule("r", "1/second", methods="GETS"), r"'GETS' .*did you mean GET\?"),
        (lambda: Rule("r", "1/second", methods=["get", "psot"]), r"'psot' .*did you mean POST"),
        (lambda: Rule("r", "1/second", cost={"GETT": 1}), r"rule 'r' cost: 'GETT' .*mean GET"),
        (lambda: by_client_ip(None), r"trusted_proxies=None: give a list"),
        (
            lambda: by_client_ip(trusted_proxy=["10.0.0.1"]),
            r"by_client_ip\(\): unknown keyword 'trusted_proxy'.*did you mean trusted_proxies",
        ),
        (lambda: by_client_ip(["0.0.0.0/0"]), r"'0\.0\.0\.0/0' trusts every address"),
        (lambda: by_client_ip(["10.0.0.0/8", "::/0"]), r"'::/0' trusts every address"),
        (lambda: by_api_key(hased=False), r"by_api_key\(\).*did you mean hashed"),
        (lambda: override("per-ip", costs=10), r"override\(\): .*'costs'.*did you mean cost\?"),
        (lambda: limit("5/minute"), r"limit\(\) needs name="),
        (lambda: limit("5/minute", nam="x"), r"'nam'.*did you mean name\?"),
    ],
)
def test_a_first_mistake_is_a_configuration_error_saying_what_to_write(
    build: Any, message: str
) -> None:
    """Each is refused when it is written, naming the function and the nearest fix."""
    with pytest.raises(ConfigurationError, match=message):
        build()


def test_extension_methods_are_still_taken() -> None:
    """A method far from every standard one is an extension, not a typo."""
    rule = Rule("r", "1/second", methods=["M-SEARCH", "PURGE", "propfind", "FETCH"])
    assert rule.methods == {"M-SEARCH", "PURGE", "PROPFIND", "FETCH"}
    Rule("r", "1/second", cost={"PURGE": 0, "*": 1})


async def test_the_header_name_is_taken_in_any_case() -> None:
    """``header="X-Forwarded-For"`` reads X-Forwarded-For behind a trusted proxy."""
    rules = RuleSet(
        [Rule("per-ip", "1/minute")],
        default_key=by_client_ip(["198.51.100.4"], header="X-Forwarded-For"),
    )
    app = Starlette(routes=[Route("/", ok)])
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore()), rules=rules)
    transport = httpx.ASGITransport(app=app, client=("198.51.100.4", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        first = await client.get("/", headers={"x-forwarded-for": "203.0.113.1"})
        second = await client.get("/", headers={"x-forwarded-for": "203.0.113.2"})
        again = await client.get("/", headers={"x-forwarded-for": "203.0.113.1"})
    assert [first.status_code, second.status_code, again.status_code] == [200, 200, 429]
    assert repr(by_client_ip(header=" Forwarded ")).endswith("header='forwarded')")


def test_a_wsgi_middleware_without_rules_says_what_to_give() -> None:
    """Not 'missing 1 required keyword-only argument': the class, rules= and an example."""
    app = Flask(__name__)
    with pytest.raises(ConfigurationError, match=r"WSGIRateLimitMiddleware needs rules=.*RuleSet"):
        WSGIRateLimitMiddleware(app.wsgi_app, limiter=Limiter(MemoryStore()))
    with pytest.raises(ConfigurationError, match=r"^RateLimitMiddleware needs rules="):
        RateLimitMiddleware(app, limiter=AsyncLimiter(AsyncMemoryStore()))
    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=Limiter(MemoryStore()), rules=RuleSet([Rule("r", "1/minute")])
    )
    assert WerkzeugClient(app).get("/").status_code == 404  # built, and serving
