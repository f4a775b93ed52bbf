"""``RATEWARDEN_MIDDLEWARE`` mistakes refused naming the setting and what to write, and a
Django route's decorator naming no rule refused at the first request, to any route."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import override_settings
from django.urls import path

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import Rule, RuleSet, exempt
from ratewarden.middleware.django import DjangoRateLimitMiddleware

LIMITER = Limiter(MemoryStore())
RULES = RuleSet([Rule("per-ip", "100/minute")])


def _built(**settings: Any) -> None:
    with override_settings(**settings):
        DjangoRateLimitMiddleware(lambda request: HttpResponse())


def test_failure_mode_is_named_as_the_setting_s_key() -> None:
    """Before: "RATEWARDEN_MIDDLEWARE: middleware failure_mode True must be one of ...",
    "middleware" being no name the user wrote."""
    with pytest.raises(
        ConfigurationError,
        match=r"^RATEWARDEN_MIDDLEWARE\['failure_mode'\] is True: one of 'open', 'closed'$",
    ):
        _built(RATEWARDEN_MIDDLEWARE={"limiter": LIMITER, "rules": RULES, "failure_mode": True})


def test_a_misspelt_setting_is_pointed_at() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"found None \(there is a setting RATEWARDEN_MIDDLEWARES: a misspelling\?\)",
    ):
        _built(RATEWARDEN_MIDDLEWARES={"limiter": LIMITER, "rules": RULES})


def test_a_list_of_rules_is_told_to_be_wrapped_in_a_rule_set() -> None:
    with pytest.raises(ConfigurationError, match=r"wrap the list, RuleSet\(\[Rule\(\.\.\.\), "):
        _built(RATEWARDEN_MIDDLEWARE={"limiter": LIMITER, "rules": [Rule("r", "1/second")]})


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse("home")


@exempt("per_ip")
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("", home), path("api/health", health)]


def test_an_exempt_naming_no_rule_is_refused_at_the_first_request_to_any_route() -> None:
    """``@exempt("per_ip")`` on /api/health: "/" is refused too, with the message the route's
    own request had (before: only requests to /api/health, once one came)."""
    with (
        override_settings(
            ROOT_URLCONF=__name__,
            MIDDLEWARE=["ratewarden.middleware.django.DjangoRateLimitMiddleware"],
            RATEWARDEN_MIDDLEWARE={"limiter": LIMITER, "rules": RULES},
        ),
        pytest.raises(
            ConfigurationError,
            match=r"@exempt\('per_ip'\) on /api/health names no rule of the RuleSet; "
            r"its rules: \['per-ip'\]",
        ),
    ):
        Client().get("/")
