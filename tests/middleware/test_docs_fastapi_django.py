"""What docs/middleware.md says about FastAPI users and Django's tests, checked on real apps:
the Depends example keys on the user, AuthenticationMiddleware must be added after the rate
limiter, a HEAD to a FastAPI GET route is a 405, and a setting overridden in setUp gives each
test's client a limiter of its own."""

from __future__ import annotations

import unittest
from typing import Any

import httpx
from django.test import SimpleTestCase
from django.test.utils import override_settings
from fastapi import FastAPI
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    BaseUser,
    SimpleUser,
)
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.middleware import RateLimitMiddleware, RequestInfo, Rule, RuleSet, by_user
from tests.middleware._sfv import parse_list
from tests.middleware.test_docs_examples import BLOCKS, _run


def _client(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def _left(response: httpx.Response) -> int:
    return int(parse_list(response.headers["ratelimit"])[0].params["r"])


async def test_the_depends_example_counts_each_token_s_user() -> None:
    """Alice's valid token has a budget of her own; a request without one (and one with a
    token the check refuses) is counted by address, and the dependency still answers 401."""
    (block,) = [b for b in BLOCKS if "Depends(current_user)" in b]
    app = _run(block)["app"]
    alice = {"authorization": "Bearer t-alice"}
    async with _client(app) as client:
        first = await client.get("/me", headers=alice)
        assert first.json() == {"user": "alice"} and _left(first) == 99
        assert _left(await client.get("/me", headers=alice)) == 98
        anonymous = await client.get("/me")
        assert anonymous.status_code == 401 and _left(anonymous) == 99
        forged = await client.get("/me", headers={"authorization": "Bearer t-mallory"})
        assert forged.status_code == 401 and _left(forged) == 98  # the address's budget


class HeaderAuth(AuthenticationBackend):
    """Signs in the user named by ``X-User``."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        name = conn.headers.get("x-user")
        return (AuthCredentials(["authenticated"]), SimpleUser(name)) if name else None


def _scope_user(request: RequestInfo) -> object | None:
    user = request.raw["user"]
    return user.display_name if user.is_authenticated else None


def _with_auth(auth_added_last: bool) -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def home() -> str:
        return "home"

    rules = RuleSet([Rule("per-user", "10/minute", key=by_user(_scope_user))])
    limiting: dict[str, Any] = {"limiter": AsyncLimiter(AsyncMemoryStore()), "rules": rules}
    if auth_added_last:
        app.add_middleware(RateLimitMiddleware, **limiting)
        app.add_middleware(AuthenticationMiddleware, backend=HeaderAuth())
    else:
        app.add_middleware(AuthenticationMiddleware, backend=HeaderAuth())
        app.add_middleware(RateLimitMiddleware, **limiting)
    return app


async def test_authentication_middleware_added_after_the_rate_limiter_runs_first() -> None:
    """Added last, AuthenticationMiddleware is outermost: each user has a budget. Added
    first, the rules run before there is a user: the extractor's KeyError is a 500."""
    async with _client(_with_auth(auth_added_last=True)) as client:
        assert _left(await client.get("/", headers={"x-user": "ann"})) == 9
        assert _left(await client.get("/", headers={"x-user": "ann"})) == 8
        assert _left(await client.get("/", headers={"x-user": "bob"})) == 9
    async with _client(_with_auth(auth_added_last=False)) as client:
        assert (await client.get("/", headers={"x-user": "ann"})).status_code == 500


async def test_a_head_to_a_fastapi_get_route_is_a_405_that_cost_zero_spares() -> None:
    """@app.get answers HEAD with 405; with cost={"HEAD": 0, "*": 1} it spends nothing, and a
    route declaring HEAD answers it."""
    app = FastAPI()

    @app.get("/items")
    async def items() -> list[str]:
        return []

    @app.api_route("/both", methods=["GET", "HEAD"])
    async def both() -> list[str]:
        return []

    rules = RuleSet([Rule("reads", "5/minute", methods="GET", cost={"HEAD": 0, "*": 1})])
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore()), rules=rules)
    async with _client(app) as client:
        refused = await client.head("/items")
        assert refused.status_code == 405 and _left(refused) == 5
        assert (await client.head("/both")).status_code == 200
        assert _left(await client.get("/items")) == 4


def test_a_setting_overridden_in_setup_gives_each_test_a_fresh_limiter() -> None:
    """The page's setUp, in a Django test case run twice: each test's client is limited by
    its own limiter (the first request of each sees the whole budget), though the client was
    made before setUp ran."""
    seen: list[str] = []
    rules = RuleSet([Rule("per-ip", "3/minute")])

    class Orders(SimpleTestCase):
        def setUp(self) -> None:
            setting = {"limiter": Limiter(MemoryStore()), "rules": rules}
            self.enterContext(override_settings(RATEWARDEN_MIDDLEWARE=setting))

        def test_one(self) -> None:
            seen.extend(self.client.get("/notes")["RateLimit"] for _ in range(2))

        def test_two(self) -> None:
            seen.append(self.client.get("/notes")["RateLimit"])

    with override_settings(
        ROOT_URLCONF="tests.middleware.test_django_middleware",
        MIDDLEWARE=["ratewarden.middleware.django.DjangoRateLimitMiddleware"],
    ):
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Orders)
        result = unittest.TextTestRunner(stream=_Null(), verbosity=0).run(suite)
    assert result.wasSuccessful(), result.errors + result.failures
    assert [int(parse_list(v)[0].params["r"]) for v in seen] == [2, 1, 2]


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
