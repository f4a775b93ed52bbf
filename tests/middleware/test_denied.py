"""What a denied request gets when a rule or its rule set says: ``Denied`` and ``Denial``.

Real Starlette and Flask apps in process (the ASGI and the WSGI middleware); the awaited
limiter path on a real redis-server.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import (
    Denial,
    Denied,
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
    flask_endpoint,
    limit,
    override,
)
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.middleware._helpers import peer_client
from tests.middleware._sfv import parse_list

SLOW_DOWN = Denied(
    {"error": "slow_down"}, status=503, headers={"X-Reason": "busy", "Vary": "Accept"}
)


async def home(request: Request) -> Response:
    return PlainTextResponse("home")


@limit("1/minute", name="login", denied=Denied("too many logins", status=429))
async def login(request: Request) -> Response:
    return PlainTextResponse("welcome")


@override("per-ip", cost=5)
async def report(request: Request) -> Response:
    return PlainTextResponse("report")


def _starlette(
    ruleset: RuleSet, clock: ManualClock, limiter: Any = None, *, decorated: bool = True
) -> Starlette:
    """The app; ``decorated=False`` leaves out the routes whose decorators name ``per-ip``,
    for a rule set without it (the rule set checks every route at the first request)."""
    routes = [Route("/", home, methods=["GET", "HEAD"])]
    if decorated:
        routes += [Route("/login", login), Route("/report", report)]
    app = Starlette(routes=routes)
    if limiter is None:
        limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=ruleset)
    return app


def _negotiated(denial: Denial) -> Denied | None:
    """HTML for browsers, JSON naming the rule and the wait for the rest, default for curl."""
    accept = denial.request.headers.get("accept", "")
    if "text/html" in accept:
        return Denied(f"<p>Slow down: {denial.rule}</p>", content_type="text/html")
    if "application/json" in accept:
        return Denied(
            {"rule": denial.rule, "key": denial.key, "wait": denial.retry_after,
             "path": denial.request.path, "remaining": denial.decision.remaining}
        )  # fmt: skip
    return None


# --- Denied, checked --------------------------------------------------------------------------


def test_a_denied_answer_takes_its_type_from_its_body() -> None:
    assert Denied().body == b"" and Denied().content_type == "application/octet-stream"
    assert Denied(b"\x00\x01").content_type == "application/octet-stream"
    text = Denied("héllo")
    assert (text.body, text.content_type) == ("héllo".encode(), "text/plain; charset=utf-8")
    document = Denied({"a": [1, 2]})
    assert (document.body, document.content_type) == (b'{"a":[1,2]}', "application/json")
    assert Denied([1], content_type="application/vnd.api+json").content_type == (
        "application/vnd.api+json"
    )
    assert Denied(status=400).status == 400 and Denied(status=599).status == 599
    assert Denied(headers=[("X-A", "1"), ("X-A", "2")]).headers == (("X-A", "1"), ("X-A", "2"))


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"status": 200}, "status 200 must be a 4xx or 5xx code"),
        ({"status": 399}, "status 399"),
        ({"status": 600}, "status 600"),
        ({"status": True}, "status True"),
        ({"status": "429"}, "status '429'"),
        ({"body": 42}, "body 42 must be bytes, a str, or a dict or list"),
        ({"body": {"x": float("nan")}}, "cannot be written as JSON"),
        ({"body": {"x": {1, 2}}}, "cannot be written as JSON"),
        ({"content_type": ""}, "content_type ''"),
        ({"content_type": "text/html\r\nX-Evil: 1"}, "without line breaks"),
        ({"headers": {"X-A": "ok\nX-Evil: 1"}}, "without line breaks"),
        ({"headers": {"Bad Name": "1"}}, "header name 'Bad Name' must be an HTTP field name"),
        ({"headers": {"X-A": 1}}, "header 'X-A' value 1"),
        ({"headers": {"Content-Length": "3"}}, "'Content-Length' is set by the middleware"),
        ({"headers": {"content-type": "text/plain"}}, "give the body's type as content_type="),
        ({"headers": {"Retry-After": "9"}}, "'Retry-After' is set by the middleware"),
        ({"headers": {"RateLimit": "x"}}, "'RateLimit' is set by the middleware"),
        ({"headers": {"X-RateLimit-Limit": "9"}}, "'X-RateLimit-Limit' is set by the middleware"),
        ({"headers": {"Cache-Control": "no-cache"}}, "'Cache-Control' is set by the middleware"),
        ({"headers": ["X-A"]}, "must be a mapping or (name, value) pairs"),
    ],
)
def test_a_bad_denied_answer_is_refused_by_name(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Denied(**kwargs)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("Retry-After", "(the decision's wait, none when no wait would help"),
        ("x-ratelimit-foo", "(the rule set's HeaderOptions(legacy=True) sends the X-RateLimit-*"),
        ("RateLimit-Policy", "(the rule's policies, by the rule set's HeaderOptions)"),
        ("Content-Length", "(it is the length of the body)"),
        ("Cache-Control", "(no-store: a denial is never cached)"),
    ],
)
def test_only_content_type_is_told_to_use_content_type(name: str, says: str) -> None:
    """The content_type= hint is for Content-Type alone; every other header the middleware
    sets is refused with where it comes from."""
    with pytest.raises(ConfigurationError) as caught:
        Denied("x", headers={name: "5"})
    assert says in str(caught.value)
    assert "content_type" not in str(caught.value)


def test_a_rule_or_rule_set_refuses_a_denied_that_is_neither_an_answer_nor_a_callable() -> None:
    with pytest.raises(ConfigurationError, match=r"rule 'r': denied 429 must be a Denied"):
        Rule("r", "1/second", denied=429)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"RuleSet: denied 'x' must be a Denied"):
        RuleSet([Rule("r", "1/second")], denied="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"rule 'l': denied"):
        limit("1/second", name="l", denied=b"no")  # type: ignore[arg-type]


# --- ASGI: the scope path, the general path, route rules ----------------------------------------


async def test_a_rule_s_own_answer_keeps_the_rate_limit_headers_and_retry_after() -> None:
    """One plain rule (the scope path): status, body, type and extra headers are the rule's;
    RateLimit, Retry-After, no-store and the length are the middleware's."""
    clock = ManualClock()
    ruleset = RuleSet([Rule("per-ip", "2/minute", denied=SLOW_DOWN)], clock=clock)
    assert ruleset.plain_asgi
    app = _starlette(ruleset, clock)
    async with peer_client(app) as client:
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/")).status_code == 200
        clock.advance(5)
        denied = await client.get("/")
        head = await client.head("/")
    assert denied.status_code == 503 and denied.json() == {"error": "slow_down"}
    assert denied.headers["content-type"] == "application/json"
    assert denied.headers["content-length"] == str(len(denied.content))
    assert denied.headers["retry-after"] == "25"  # GCRA: the next of 2 a minute in 30 s
    assert denied.headers["cache-control"] == "no-store"
    assert denied.headers["x-reason"] == "busy" and denied.headers["vary"] == "Accept"
    assert parse_list(denied.headers["ratelimit"])[0].params["r"] == 0
    assert "ratelimit-policy" in denied.headers
    assert head.status_code == 503 and head.content == b""
    assert head.headers["content-length"] == denied.headers["content-length"]


async def test_a_rule_set_s_callable_sees_the_denial_and_the_request() -> None:
    """Several rules (the general path): the callable reads the request's Accept; None keeps
    the default problem document."""
    clock = ManualClock()
    rules = [
        Rule("per-ip", "3/minute"),
        Rule("contract", "10/minute", key=by_api_key(), methods=["GET"]),
    ]
    ruleset = RuleSet(rules, clock=clock, denied=_negotiated)
    assert not ruleset.plain_asgi
    app = _starlette(ruleset, clock)
    async with peer_client(app) as client:
        for _ in range(3):
            assert (await client.get("/", headers={"X-Api-Key": "k"})).status_code == 200
        html = await client.get("/", headers={"Accept": "text/html"})
        data = await client.get("/", headers={"Accept": "application/json"})
        plain = await client.get("/")
    assert html.status_code == 429 and html.text == "<p>Slow down: per-ip</p>"
    assert html.headers["content-type"] == "text/html"
    assert data.json() == {
        "rule": "per-ip", "key": "per-ip:ip:198.51.100.4", "wait": 20, "path": "/", "remaining": 0
    }  # fmt: skip
    assert data.headers["retry-after"] == "20"  # GCRA: the next of 3 a minute
    assert plain.headers["content-type"] == "application/problem+json"
    assert plain.json()["policy"] == "per-ip"


async def test_a_rule_s_own_answer_wins_over_the_rule_set_s_and_route_rules_keep_theirs() -> None:
    clock = ManualClock()
    ruleset = RuleSet(
        [Rule("per-ip", "6/minute", denied=Denied("per-ip says no"))],
        clock=clock,
        denied=Denied("the rule set says no", status=403),
    )
    app = _starlette(ruleset, clock)
    async with peer_client(app) as client:
        assert (await client.get("/login")).status_code == 200
        second = await client.get("/login")
        # per-ip used 2 of 6; a report costs 5 under @override and keeps the rule's answer.
        overridden = await client.get("/report")
    assert second.status_code == 429 and second.text == "too many logins"
    assert '"login"' in second.headers["ratelimit"]
    assert overridden.status_code == 429 and overridden.text == "per-ip says no"


async def test_a_rule_set_s_answer_covers_route_rules_without_their_own() -> None:
    clock = ManualClock()

    @limit("1/minute", name="export")
    async def export(request: Request) -> Response:
        return PlainTextResponse("export")

    app = Starlette(routes=[Route("/export", export)])
    ruleset = RuleSet([], clock=clock, denied=Denied("not now", status=403))
    app.add_middleware(
        RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)), rules=ruleset
    )
    async with peer_client(app) as client:
        assert (await client.get("/export")).status_code == 200
        refused = await client.get("/export")
    assert refused.status_code == 403 and refused.text == "not now"


async def test_a_failing_callable_never_lets_the_request_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It raises, or returns something else: the default 429 answers, logged once a minute."""
    clock = ManualClock()
    calls: list[str] = []

    def broken(denial: Denial) -> Any:
        calls.append(denial.rule)
        if len(calls) % 2:
            raise RuntimeError("template missing")
        return "not a Denied"

    ruleset = RuleSet([Rule("per-ip", "1/minute")], clock=clock, denied=broken)
    app = _starlette(ruleset, clock)
    caplog.set_level(logging.ERROR, logger="ratewarden.middleware")
    async with peer_client(app) as client:
        assert (await client.get("/")).status_code == 200
        answers = [await client.get("/") for _ in range(4)]
        clock.advance(61)
        assert (await client.get("/")).status_code == 200  # a new window
        answers.append(await client.get("/"))
    assert calls == ["per-ip"] * 5
    assert all(a.status_code == 429 for a in answers)
    assert all(a.json()["policy"] == "per-ip" for a in answers)
    lines = [r.getMessage() for r in caplog.records if r.name == "ratewarden.middleware"]
    assert len(lines) == 2, lines
    assert "rule 'per-ip': its denied hook failed (RuntimeError: template missing)" in lines[0]
    assert "(RuntimeError: template missing)" in lines[1]
    assert "(3 similar lines suppressed)" in lines[1]


async def test_a_callable_returning_something_else_is_logged_with_what_it_returned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    ruleset = RuleSet([Rule("per-ip", "1/minute")], clock=clock, denied=lambda denial: 42)
    app = _starlette(ruleset, clock)
    caplog.set_level(logging.ERROR, logger="ratewarden.middleware")
    async with peer_client(app) as client:
        assert (await client.get("/")).status_code == 200
        refused = await client.get("/")
    assert refused.status_code == 429 and refused.json()["policy"] == "per-ip"
    [line] = [r.getMessage() for r in caplog.records if r.name == "ratewarden.middleware"]
    assert "(ConfigurationError: it returned 42, not a Denied or None)" in line


async def test_shadow_rules_never_reach_the_answer() -> None:
    clock = ManualClock()
    answered: list[Denial] = []

    def record(denial: Denial) -> None:
        answered.append(denial)

    ruleset = RuleSet([Rule("trial", "1/minute", shadow=True)], clock=clock, denied=record)
    app = _starlette(ruleset, clock, decorated=False)
    async with peer_client(app) as client:
        assert [(await client.get("/")).status_code for _ in range(3)] == [200] * 3
    assert answered == []


@pytest.mark.redis
async def test_the_awaited_limiter_path_answers_the_same(redis_server: RedisServer) -> None:
    """An ``AsyncLimiter`` on Redis (no ``hit_now``): the one-rule scope path is awaited."""
    clock = ManualClock()
    store = AsyncRedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    try:
        seen: list[Denial] = []

        def answer(denial: Denial) -> Denied:
            seen.append(denial)
            return Denied({"path": denial.request.path, "wait": denial.retry_after})

        ruleset = RuleSet([Rule("redis-ip", "1/minute")], clock=clock, denied=answer)
        assert ruleset.plain_asgi
        app = _starlette(ruleset, clock, AsyncLimiter(store), decorated=False)
        async with peer_client(app) as client:
            assert (await client.get("/")).status_code == 200
            refused = await client.get("/")
        assert refused.status_code == 429 and refused.json() == {"path": "/", "wait": 60}
        assert refused.headers["retry-after"] == "60"
        assert seen[0].key == "redis-ip:ip:198.51.100.4" and not seen[0].decision.allowed
    finally:
        await store.aclose()


# --- WSGI: Flask and Django ---------------------------------------------------------------------


def test_flask_answers_with_the_rule_s_own_denial() -> None:
    clock = ManualClock()
    app = Flask(__name__)

    @app.route("/items")
    def items() -> str:
        return "items"

    @app.route("/upload", methods=["POST"])
    @limit("1/minute", name="upload", denied=Denied({"error": "one upload a minute"}))
    def upload() -> str:
        return "stored"

    ruleset = RuleSet(
        [Rule("per-ip", "2/minute")],
        clock=clock,
        resolver=flask_endpoint(app),
        denied=_negotiated,
        headers=HeaderOptions(legacy=True),
    )
    limiter = Limiter(MemoryStore(clock=clock))
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=ruleset)  # type: ignore[method-assign]
    client = app.test_client()
    assert client.post("/upload").status_code == 200
    refused = client.post("/upload")
    assert refused.status_code == 429 and refused.json == {"error": "one upload a minute"}
    assert refused.headers["Retry-After"] == "60"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    # per-ip: 2 used by the uploads.
    page = client.get("/items", headers={"Accept": "text/html"})
    assert page.status_code == 429 and page.data == b"<p>Slow down: per-ip</p>"
    assert page.headers["Content-Length"] == str(len(page.data))
    assert json.loads(client.get("/items").data)["policy"] == "per-ip"


@pytest.mark.parametrize(("status", "line"), [(403, "403 FORBIDDEN"), (499, "499 CLIENT ERROR")])
def test_any_4xx_or_5xx_code_makes_a_wsgi_status_line(status: int, line: str) -> None:
    """WSGI needs a reason phrase: the registered one, else the code's class."""
    clock = ManualClock()
    app = Flask(__name__)

    @app.route("/")
    def index() -> str:
        return "index"

    ruleset = RuleSet([Rule("per-ip", "1/minute", denied=Denied("no", status=status))], clock=clock)
    limiter = Limiter(MemoryStore(clock=clock))
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=ruleset)  # type: ignore[method-assign]
    client = app.test_client()
    assert client.get("/").status_code == 200
    refused = client.get("/")
    assert (refused.status.upper(), refused.data) == (line, b"no")
