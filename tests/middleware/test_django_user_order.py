"""``DjangoRateLimitMiddleware`` listed before ``AuthenticationMiddleware``: no request has a
``user`` yet, so ``by_user(django_user)`` finds nobody and every signed-in user is counted by
address. That used to happen silently; now the ``ratewarden.middleware`` logger says so,
naming the MIDDLEWARE order to fix, once per process."""

from __future__ import annotations

import logging
import threading

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import Client
from django.test.utils import override_settings

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.middleware import Rule, RuleSet, by_client_ip, by_user, first_of
from ratewarden.middleware import django as django_middleware
from ratewarden.middleware.django import django_user
from ratewarden.testing import ManualClock
from tests.middleware._helpers import client_for

RATE_LIMITER = "ratewarden.middleware.django.DjangoRateLimitMiddleware"
SIGNED_IN = "tests.middleware.test_django_middleware.SignedIn"
SIGNED_IN_ASYNC = "tests.middleware.test_django_async.SignedInAsync"
URLS = "tests.middleware.test_django_middleware"


@pytest.fixture(autouse=True)
def untold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a fresh process would: the warning not yet given."""
    monkeypatch.setattr(django_middleware, "_no_user_told", threading.Event())


def _rules(clock: ManualClock) -> RuleSet:
    key = first_of(by_user(django_user), by_client_ip())
    return RuleSet([Rule("per-user", "5/minute", key=key)], clock=clock)


def _told(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ratewarden.middleware" and "has no 'user'" in r.getMessage()
    ]


def test_listed_before_the_user_middleware_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    """Sync mode, the rate limiter first: the signed-in user is counted by address (the
    budget is shared with an anonymous request), and one warning names the fix."""
    clock = ManualClock()
    setting = {"limiter": Limiter(MemoryStore(clock=clock)), "rules": _rules(clock)}
    caplog.set_level(logging.WARNING, logger="ratewarden.middleware")
    with override_settings(
        ROOT_URLCONF=URLS, MIDDLEWARE=[RATE_LIMITER, SIGNED_IN], RATEWARDEN_MIDDLEWARE=setting
    ):
        client = Client()
        for _ in range(3):
            answer = client.get("/notes", HTTP_X_TEST_USER="7")
        assert "r=2" in answer["RateLimit"]  # the address's budget, five a minute
        assert "r=1" in client.get("/notes")["RateLimit"]  # anonymous: the same budget
    told = _told(caplog)
    assert len(told) == 1
    assert "'django.contrib.auth.middleware.AuthenticationMiddleware'" in told[0]
    assert "after" in told[0] and "MIDDLEWARE" in told[0]


def test_listed_after_the_user_middleware_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """The documented order, signed in or anonymous: no warning."""
    clock = ManualClock()
    setting = {"limiter": Limiter(MemoryStore(clock=clock)), "rules": _rules(clock)}
    caplog.set_level(logging.WARNING, logger="ratewarden.middleware")
    with override_settings(
        ROOT_URLCONF=URLS, MIDDLEWARE=[SIGNED_IN, RATE_LIMITER], RATEWARDEN_MIDDLEWARE=setting
    ):
        client = Client()
        assert client.get("/notes", HTTP_X_TEST_USER="7").status_code == 200
        assert client.get("/notes").status_code == 200
    assert _told(caplog) == []


async def test_async_mode_listed_before_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    """Async mode under Django's ASGI handler: no ``auser`` and no ``user`` yet; warned once."""
    clock = ManualClock()
    setting = {"limiter": AsyncLimiter(AsyncMemoryStore(clock=clock)), "rules": _rules(clock)}
    caplog.set_level(logging.WARNING, logger="ratewarden.middleware")
    with override_settings(
        ROOT_URLCONF="tests.middleware.test_django_async",
        MIDDLEWARE=[RATE_LIMITER, SIGNED_IN_ASYNC],
        RATEWARDEN_MIDDLEWARE=setting,
    ):
        async with client_for(ASGIHandler()) as client:
            for _ in range(3):
                answer = await client.get("/notes", headers={"X-Test-User": "7"})
                assert answer.status_code == 200
    assert len(_told(caplog)) == 1
