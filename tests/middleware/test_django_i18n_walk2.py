"""Routes under Django's ``i18n_patterns`` carry their decorators whatever language the thread
last activated: the route is resolved under the language its path names.

Django's ``LocalePrefixPattern`` matches the prefix of the active language. The WSGI and ASGI
middlewares run before ``LocaleMiddleware``, so the active language was the previous request's
on that thread: alternating ``/en/`` and ``/fr/`` made every request miss its route (8 of 8
allowed past a 2/minute ``@limit``), and under ASGI the route rules never applied.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from django.conf.urls.i18n import i18n_patterns
from django.core.handlers.asgi import ASGIHandler
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import override_settings
from django.urls import path
from django.utils import translation
from werkzeug.test import Client as WerkzeugClient

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    django_endpoint,
    exempt,
    limit,
)
from ratewarden.testing import ManualClock

LOCALE = "django.middleware.locale.LocaleMiddleware"
RATE_LIMITER = "ratewarden.middleware.django.DjangoRateLimitMiddleware"


@limit("2/minute", name="sign-in")
def sign_in(request: HttpRequest) -> HttpResponse:
    return HttpResponse(translation.get_language())


@exempt()
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("unprefixed/", health), *i18n_patterns(path("sign-in/", sign_in))]
ALTERNATING = ["/en/sign-in/", "/fr/sign-in/"] * 2


@pytest.fixture
def i18n(request: pytest.FixtureRequest) -> Iterator[None]:
    """Two languages, this module's urlconf; the thread left in French by an earlier request."""
    middleware = getattr(request, "param", [LOCALE])
    with override_settings(
        ROOT_URLCONF=__name__,
        LANGUAGE_CODE="en",
        LANGUAGES=[("en", "English"), ("fr", "French")],
        MIDDLEWARE=middleware,
    ):
        translation.activate("fr")
        try:
            yield
        finally:
            translation.deactivate()


def _rules(clock: ManualClock) -> RuleSet:
    return RuleSet([Rule("per-ip", "100/minute")], clock=clock, resolver=django_endpoint)


def test_wsgi_alternating_languages_meet_the_route_limit(i18n: None) -> None:
    """WSGI: /en/ and /fr/ alternating share the route's 2/minute: the third is denied by it
    (before: all four allowed, each resolved under the other request's language)."""
    clock = ManualClock()
    app = WSGIRateLimitMiddleware(
        get_wsgi_application(), limiter=Limiter(MemoryStore(clock=clock)), rules=_rules(clock)
    )
    client = WerkzeugClient(app)
    answers = [client.get(p, environ_base={"REMOTE_ADDR": "203.0.113.9"}) for p in ALTERNATING]
    assert [a.status_code for a in answers] == [200, 200, 429, 429]
    assert [a.get_data(as_text=True) for a in answers[:2]] == ["en", "fr"]
    assert all('"sign-in"' in a.headers["RateLimit-Policy"] for a in answers)
    assert '"sign-in"' in answers[2].headers["RateLimit"]


def test_wsgi_an_unprefixed_route_resolves_whatever_the_thread_s_language(i18n: None) -> None:
    """A route outside i18n_patterns is found with a French thread: its @exempt applies."""
    clock = ManualClock()
    app = WSGIRateLimitMiddleware(
        get_wsgi_application(), limiter=Limiter(MemoryStore(clock=clock)), rules=_rules(clock)
    )
    answer = WerkzeugClient(app).get("/unprefixed/")
    assert answer.status_code == 200 and "RateLimit" not in answer.headers


async def test_asgi_alternating_languages_meet_the_route_limit(i18n: None) -> None:
    """ASGI: ``RateLimitMiddleware(ASGIHandler(), ...)`` with ``django_endpoint``: the same
    (before: the route rule never applied)."""
    clock = ManualClock()
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app = RateLimitMiddleware(ASGIHandler(), limiter=limiter, rules=_rules(clock))
    transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        answers = [await client.get(p) for p in ALTERNATING]
    assert [a.status_code for a in answers] == [200, 200, 429, 429]
    assert '"sign-in"' in answers[2].headers["RateLimit"]


@pytest.mark.parametrize("i18n", [[RATE_LIMITER, LOCALE]], indirect=True)
def test_django_middleware_before_locale_middleware_meets_the_route_limit(i18n: None) -> None:
    """The Django middleware listed before ``LocaleMiddleware`` resolves the same way."""
    clock = ManualClock()
    options = {"limiter": Limiter(MemoryStore(clock=clock)), "rules": _rules(clock)}
    with override_settings(RATEWARDEN_MIDDLEWARE=options):
        client = Client(REMOTE_ADDR="203.0.113.9")
        statuses = [client.get(p).status_code for p in ALTERNATING]
    assert statuses == [200, 200, 429, 429]
