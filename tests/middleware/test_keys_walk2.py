"""Key extractor mistakes refused by name: at ``Rule(...)`` when they can be told there, else
at the request, naming the rule and what the extractor returned (never a bare ``TypeError``).

Before, ``Rule`` only checked that ``key`` was callable: ``key=django_user`` (without
``by_user``) served anonymous users and failed every signed-in one with
``TypeError: can only concatenate str (not "int") to str``, and an uncalled factory
(``key=by_client_ip``) failed every request with a message about its own arguments.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.test.utils import override_settings
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Route

import tests.middleware.test_django_middleware as django_app
from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import (
    ClientIP,
    RateLimitMiddleware,
    RequestInfo,
    Rule,
    RuleSet,
    WSGIConcurrencyMiddleware,
    by_api_key,
    by_client_ip,
    by_user,
    first_of,
    limit,
)
from ratewarden.middleware.django import django_user
from ratewarden.testing import ManualClock
from tests.middleware._helpers import ok


@pytest.mark.parametrize(
    ("key", "advice"),
    [
        (by_client_ip, "key=by_client_ip()"),
        (by_api_key, "key=by_api_key()"),
        (by_user, "key=by_user(callback)"),
        (first_of, "key=first_of(by_api_key(), by_client_ip())"),
        (ClientIP, "key=ClientIP()"),
        (django_user, "key=by_user(django_user)"),
    ],
    ids=["by_client_ip", "by_api_key", "by_user", "first_of", "ClientIP", "django_user"],
)
def test_a_factory_given_uncalled_or_django_user_is_refused_at_the_rule(
    key: Any, advice: str
) -> None:
    """At ``Rule``, ``@limit``, ``RuleSet(default_key=...)`` and the concurrency middleware's
    ``key``, saying what to give instead."""
    with pytest.raises(ConfigurationError, match=r"rule 'k': key=\w+ is not a key extractor"):
        Rule("k", "5/minute", key=key)
    with pytest.raises(ConfigurationError, match=advice.replace("(", r"\(").replace(")", r"\)")):
        limit("5/minute", name="k", key=key)
    with pytest.raises(ConfigurationError, match="RuleSet default_key: key="):
        RuleSet([Rule("k", "5/minute")], default_key=key)
    with pytest.raises(ConfigurationError, match="not a key extractor"):
        WSGIConcurrencyMiddleware(lambda e, s: [b""], limiter=Limiter(), limit=1, key=key)


def _django(rules: RuleSet) -> Any:
    return override_settings(
        ROOT_URLCONF=django_app.__name__,
        MIDDLEWARE=django_app.MIDDLEWARE,
        RATEWARDEN_MIDDLEWARE={"limiter": Limiter(MemoryStore(clock=rules.clock)), "rules": rules},
    )


def test_an_extractor_returning_an_int_is_refused_by_the_rule_s_name() -> None:
    """Django: a key of the signed-in user's pk serves the anonymous (None: the fallback) and
    refuses the signed-in with a ConfigurationError naming the rule, the value, its type and
    ``by_user``; ``by_user`` of the same callback counts each user."""

    def pk(request: RequestInfo) -> object:
        return getattr(request.raw.request.user, "pk", None)

    clock = ManualClock()
    with _django(RuleSet([Rule("k", "5/minute", key=pk)], clock=clock)):
        client = Client()
        assert client.get("/notes").status_code == 200
        with pytest.raises(ConfigurationError) as refused:
            client.get("/notes", headers={"X-Test-User": "7"})
    message = str(refused.value)
    assert message.startswith("rule 'k': its key extractor returned 7 (type int)")
    assert "by_user(" in message
    with _django(RuleSet([Rule("k", "1/minute", key=by_user(pk))], clock=clock)):
        client = Client()
        assert client.get("/notes", headers={"X-Test-User": "7"}).status_code == 200
        denied = client.get("/notes", headers={"X-Test-User": "7"})
        assert denied.status_code == 429
        assert client.get("/notes", headers={"X-Test-User": "8"}).status_code == 200


class HeaderAuth(AuthenticationBackend):
    """Signs in the user named by ``X-User``; without it, Starlette's anonymous user."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        name = conn.headers.get("x-user")
        return (AuthCredentials(["authenticated"]), SimpleUser(name)) if name else None


def _starlette(key: Any) -> Starlette:
    app = Starlette(routes=[Route("/", ok)])
    rules = RuleSet([Rule("per-user", "2/minute", key=key)], clock=ManualClock())
    app.add_middleware(RateLimitMiddleware, limiter=AsyncLimiter(AsyncMemoryStore()), rules=rules)
    app.add_middleware(AuthenticationMiddleware, backend=HeaderAuth())
    return app


async def _statuses(app: Starlette, peer: str, headers: dict[str, str], count: int) -> list[int]:
    import httpx

    transport = httpx.ASGITransport(app=app, client=(peer, 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [(await client.get("/", headers=headers)).status_code for _ in range(count)]


async def test_an_unauthenticated_user_object_is_no_identity() -> None:
    """Starlette: ``by_user(lambda r: r.raw["user"])`` with ``first_of``: the anonymous
    ``UnauthenticatedUser`` counts as no user, so each address has its own budget (before:
    the object's str, a new identity per request: never limited)."""
    app = _starlette(first_of(by_user(lambda r: r.raw["user"]), by_client_ip()))
    assert await _statuses(app, "192.0.2.1", {}, 3) == [200, 200, 429]
    assert await _statuses(app, "192.0.2.2", {}, 1) == [200]


async def test_a_user_object_whose_str_is_its_address_is_refused() -> None:
    """A signed-in ``SimpleUser`` (no ``__str__`` of its own) is refused, naming its class and
    what to return; ``.identity`` counts the user."""
    app = _starlette(by_user(lambda r: r.raw["user"]))
    with pytest.raises(ConfigurationError, match=r"starlette\.authentication\.SimpleUser, whose"):
        await _statuses(app, "192.0.2.1", {"x-user": "alice"}, 1)
    app = _starlette(by_user(lambda r: r.raw["user"].identity))
    assert await _statuses(app, "192.0.2.1", {"x-user": "alice"}, 3) == [200, 200, 429]
    assert await _statuses(app, "192.0.2.9", {"x-user": "alice"}, 1) == [429]
    assert await _statuses(app, "192.0.2.1", {"x-user": "bob"}, 1) == [200]


def test_by_user_takes_ids_and_refuses_a_bool() -> None:
    """An int id is its digits; ``True``/``False`` (an ``is_authenticated`` returned by
    mistake) is refused."""
    request = RequestInfo("GET", "/", "192.0.2.1", {}, {})
    assert by_user(lambda r: 7)(request) == "user:7"
    assert by_user(lambda r: "")(request) is None
    with pytest.raises(ConfigurationError, match="returned True"):
        by_user(lambda r: True)(request)
