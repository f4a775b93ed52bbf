"""``DjangoRateLimitMiddleware``: inside Django's own middleware stack, with ``request.user``.

Real Django (its test client drives its WSGI handler and middleware chain in process).
Django's ``AuthenticationMiddleware`` needs the auth and session apps and a database;
``SignedIn`` below stands in for it the way it works: a middleware earlier in the stack
that sets ``request.user``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client
from django.test.utils import override_settings
from django.urls import path

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import (
    Denied,
    Rule,
    RuleSet,
    by_client_ip,
    by_user,
    exempt,
    first_of,
    limit,
)
from ratewarden.middleware.django import DjangoRateLimitMiddleware, django_user
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import free_port

MIDDLEWARE = [
    f"{__name__}.SignedIn",
    "ratewarden.middleware.django.DjangoRateLimitMiddleware",
]


class User:
    def __init__(self, pk: int | None) -> None:
        self.pk = pk
        self.is_authenticated = pk is not None


class SignedIn:
    """Sets ``request.user`` from ``X-Test-User`` (else an anonymous user), as Django's
    ``AuthenticationMiddleware`` sets it from the session."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        header = request.headers.get("X-Test-User")
        request.user = User(int(header) if header else None)  # type: ignore[attr-defined]
        return self.get_response(request)


def notes(request: HttpRequest) -> HttpResponse:
    response = JsonResponse({"notes": []})
    response["X-App"] = "1"
    return response


@limit("1/minute", name="django-search", denied=Denied({"error": "one search a minute"}))
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("results")


@exempt()
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("notes", notes), path("search", search), path("health", health)]

#: Module-level objects the settings name by dotted path.
CLOCK = ManualClock()
RULES = RuleSet(
    [Rule("per-user", "2/minute", key=first_of(by_user(django_user), by_client_ip()))],
    clock=CLOCK,
)
LIMITER = Limiter(MemoryStore(clock=CLOCK))


def _settings(**options: Any) -> override_settings:
    """The stack above, with ``options`` as the middleware's setting (each ``Client`` builds
    its middleware chain anew, from the settings in force)."""
    return override_settings(
        ROOT_URLCONF=__name__, MIDDLEWARE=MIDDLEWARE, RATEWARDEN_MIDDLEWARE=options
    )


def test_each_signed_in_user_has_a_budget_of_their_own() -> None:
    """by_user(django_user) counts the user Django's stack signed in; anonymous requests
    fall back to the client's address."""
    clock = ManualClock()
    rules = RuleSet(
        [Rule("per-user", "2/minute", key=first_of(by_user(django_user), by_client_ip()))],
        clock=clock,
    )
    with _settings(limiter=Limiter(MemoryStore(clock=clock)), rules=rules):
        client = Client()
        alice = {"HTTP_X_TEST_USER": "7"}
        first = client.get("/notes", **alice)
        assert first.status_code == 200 and first.json() == {"notes": []}
        assert first["X-App"] == "1" and '"per-user"' in first["RateLimit-Policy"]
        assert client.get("/notes", **alice).status_code == 200
        denied = client.get("/notes", **alice)
        assert client.get("/notes", HTTP_X_TEST_USER="8").status_code == 200
        assert client.get("/notes").status_code == 200  # anonymous: the address
        assert client.get("/notes").status_code == 200
        assert client.get("/notes").status_code == 429
        head = client.head("/notes", **alice)
    assert denied.status_code == 429
    assert denied["Content-Type"] == "application/problem+json"
    assert denied["Retry-After"] == "30" and denied["Cache-Control"] == "no-store"
    assert json.loads(denied.content)["policy"] == "per-user"
    assert "X-App" not in denied
    assert head.status_code == 429 and head.content == b""
    assert head["Content-Length"] == denied["Content-Length"]


def test_route_decorators_and_a_rule_s_own_denial() -> None:
    """@limit and @exempt on Django views, found with django_endpoint by default."""
    with _settings(limiter="tests.middleware.test_django_middleware.LIMITER",
                   rules="tests.middleware.test_django_middleware.RULES"):  # fmt: skip
        client = Client()
        assert client.get("/search", HTTP_X_TEST_USER="1").status_code == 200
        refused = client.get("/search", HTTP_X_TEST_USER="1")
        for _ in range(4):
            assert client.get("/health", HTTP_X_TEST_USER="1").status_code == 200
    assert refused.status_code == 429 and refused.json() == {"error": "one search a minute"}
    assert '"django-search"' in refused["RateLimit"]


def test_a_store_that_fails_gets_the_failure_mode_s_answer() -> None:
    """A Redis that does not answer (nothing listens on the port): closed answers 503."""
    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}", timeout=0.05)
    rules = RuleSet([Rule("per-ip", "5/minute")])
    try:
        with _settings(limiter=Limiter(store), rules=rules, failure_mode="closed"):
            refused = Client().get("/notes")
    finally:
        store.close()
    assert refused.status_code == 503 and "Retry-After" in refused
    assert json.loads(refused.content)["status"] == 503


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (None, "needs the Django setting RATEWARDEN_MIDDLEWARE"),
        ({"rules": RULES}, "RATEWARDEN_MIDDLEWARE needs 'limiter'"),
        ({"limiter": LIMITER}, "RATEWARDEN_MIDDLEWARE needs 'rules'"),
        ({"limiter": LIMITER, "rules": RULES, "store": 1}, "unknown keys ['store']"),
        ({"limiter": "tests.nowhere.LIMITER", "rules": RULES}, "['limiter']: cannot import"),
        (
            {"limiter": LIMITER, "rules": [Rule("r", "1/second")]},
            "RATEWARDEN_MIDDLEWARE: rules [Rule(",
        ),
        (
            {"limiter": LIMITER, "rules": RULES, "failure_mode": "local"},
            "RATEWARDEN_MIDDLEWARE: the middleware's failure_mode is 'open' or 'closed'",
        ),
        (
            {"limiter": LIMITER, "rules": RULES, "name": 5},
            "RATEWARDEN_MIDDLEWARE: middleware name 5 must be a non-empty string",
        ),
        (
            {"limiter": object(), "rules": RULES},
            "RATEWARDEN_MIDDLEWARE['limiter'] is <object object at",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_bad_setting_is_refused_by_name(setting: object, says: str, mode: str) -> None:
    """In either mode (the get_response Django hands it), the setting is checked first."""

    async def awaited(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    with (
        override_settings(RATEWARDEN_MIDDLEWARE=setting),
        pytest.raises(ConfigurationError) as caught,
    ):
        DjangoRateLimitMiddleware(awaited if mode == "async" else lambda r: HttpResponse("never"))
    assert says in str(caught.value)


def test_outside_the_django_middleware_django_user_finds_nobody() -> None:
    """The WSGI middleware's requests carry the environ, not Django's request."""
    from ratewarden.middleware._request import from_wsgi

    assert django_user(from_wsgi({"REQUEST_METHOD": "GET", "PATH_INFO": "/"})) is None
