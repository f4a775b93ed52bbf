"""A credential header sent twice is keyed on what the app reads, never a new identity.

Starlette's ``request.headers.get`` and FastAPI's ``Header()`` read the first of repeated
lines; under ASGI the key extractors read the same line, so a client that adds a changing
second ``X-Api-Key`` or ``Authorization`` line is still counted as itself. List fields
(``X-Forwarded-For``) keep every line. Under WSGI the server has joined the lines before the
app sees them: app and limiter read the same joined value.
"""

from __future__ import annotations

from typing import Any

import httpx
from flask import Flask, request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from werkzeug.test import Client as WerkzeugClient

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
    by_client_ip,
    first_of,
)
from ratewarden.middleware._request import from_asgi, list_value
from tests.middleware._sfv import parse_list
from tests.middleware.test_docs_examples import BLOCKS, _run

KEYS = {"k-alice": "alice"}


async def orders(request: Request) -> Response:
    who = KEYS.get(request.headers.get("x-api-key", ""))
    if who is None:
        return PlainTextResponse("unauthorized", status_code=401)
    return PlainTextResponse(f"orders for {who}")


def _starlette(key: Any) -> Starlette:
    app = Starlette(routes=[Route("/orders", orders)])
    rules = RuleSet([Rule("contract", "3/hour", key=key)])
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore()), rules=rules)
    return app


def _client(app: Any, peer: str = "198.51.100.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def _spent_then_doubled(app: Any) -> list[tuple[int, str]]:
    """Alice spends her 3 with one header line, then asks with a junk second line."""
    async with _client(app) as client:
        for _ in range(3):
            assert (
                await client.get("/orders", headers={"x-api-key": "k-alice"})
            ).status_code == 200
        answers = []
        for i in range(3):
            doubled = [("x-api-key", "k-alice"), ("x-api-key", f"junk{i}")]
            reply = await client.get("/orders", headers=doubled)
            answers.append((reply.status_code, reply.text))
        return answers


async def test_a_second_api_key_line_is_no_fresh_budget() -> None:
    """The rule's own fast path (by_api_key alone): each doubled request is alice's, denied."""
    answers = await _spent_then_doubled(_starlette(by_api_key("X-Api-Key")))
    assert [status for status, _ in answers] == [429, 429, 429]


async def test_a_second_api_key_line_is_no_fresh_budget_in_a_chain() -> None:
    """The same through ``first_of`` (the extractor called on a RequestInfo)."""
    answers = await _spent_then_doubled(_starlette(first_of(by_api_key(), by_client_ip())))
    assert [status for status, _ in answers] == [429, 429, 429]


async def test_the_depends_example_is_per_user_with_a_second_authorization_line() -> None:
    """middleware.md's FastAPI ``Depends`` example: its ``token_user`` reads the first
    ``Authorization`` line, as ``Depends(current_user)`` does, so a second line neither falls
    back to the address nor escapes alice's budget."""
    (block,) = [b for b in BLOCKS if "Depends(current_user)" in b]
    app = _run(block)["app"]
    doubled = [("authorization", "Bearer t-alice"), ("authorization", "x")]
    async with _client(app, "198.51.100.1") as one, _client(app, "198.51.100.2") as two:
        first = await one.get("/me", headers=doubled)
        assert first.json() == {"user": "alice"}
        assert parse_list(first.headers["ratelimit"])[0].params["r"] == 99
        second = await two.get("/me", headers={"authorization": "Bearer t-alice"})
        assert parse_list(second.headers["ratelimit"])[0].params["r"] == 98  # the same budget


def test_forwarded_for_lines_are_still_read_whole() -> None:
    """A list field needs every line: the proxy's appended line is the one that counts."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "client": ("10.0.0.2", 5000),
        "headers": [
            (b"x-api-key", b"first"),
            (b"x-forwarded-for", b"6.6.6.6"),
            (b"X-Api-Key", b"second"),
            (b"x-forwarded-for", b"198.51.100.20"),
        ],
    }
    info = from_asgi(scope)
    assert info.headers.get("x-api-key") == "first" and info.headers["x-forwarded-for"] == "6.6.6.6"
    assert list_value(info, "x-forwarded-for") == "6.6.6.6, 198.51.100.20"
    assert dict(info.headers) == {"x-api-key": "first", "x-forwarded-for": "6.6.6.6"}
    assert by_client_ip(["10.0.0.0/8"])(info) == "ip:198.51.100.20"
    assert by_client_ip(["10.0.0.0/8"]).asgi(scope) == "ip:198.51.100.20"
    key = by_api_key(hashed=False)
    assert key(info) == key.asgi(scope) == "key:first"
    assert key.scope_keys("c:", "anonymous")(scope) == "c:key:first"


def test_under_wsgi_app_and_limiter_read_the_same_joined_value() -> None:
    """The server joins repeated lines into one environ value; Flask sees it too and refuses
    it, so the doubled request is served to nobody (and its identity is that joined value)."""
    app = Flask(__name__)

    @app.route("/orders")
    def flask_orders() -> tuple[str, int]:
        who = KEYS.get(request.headers.get("x-api-key", ""))
        return (f"orders for {who}", 200) if who else ("unauthorized", 401)

    rules = RuleSet([Rule("contract", "3/hour", key=by_api_key())])
    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=Limiter(MemoryStore()), rules=rules
    )
    client = WerkzeugClient(app)
    for _ in range(3):
        assert client.get("/orders", headers={"x-api-key": "k-alice"}).status_code == 200
    assert client.get("/orders", headers={"x-api-key": "k-alice"}).status_code == 429
    joined = {"HTTP_X_API_KEY": "k-alice,junk"}  # wsgiref, werkzeug and gunicorn join with ","
    assert client.get("/orders", environ_overrides=joined).status_code == 401
