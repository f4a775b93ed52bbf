"""A token budget middleware needs ``estimate``: ``estimate=None`` is refused when it is built,
naming the option, on ASGI, WSGI and in Django's setting alike. It used to be let through (the
check skipped None, meant for the optional ``actual``) and every selected request was then a 500
(``'NoneType' object is not callable``). ``actual=None`` stays the default."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test.utils import override_settings

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import ConfigurationError
from ratewarden.middleware import TokenBudgetMiddleware, WSGITokenBudgetMiddleware
from ratewarden.middleware.django_budget import DjangoTokenBudgetMiddleware
from tests.middleware.test_budget_options import FLAVOURS
from tests.middleware.test_django_budget_settings import ASYNC, SYNC, URLS

SAYS = "token budget middleware estimate=None: a callable is needed"


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_estimate_none_is_refused_when_built(flavour: str) -> None:
    """``estimate=None`` is a ConfigurationError naming ``estimate``, not a 500 per request."""
    build, _ = FLAVOURS[flavour]
    with pytest.raises(ConfigurationError, match=SAYS):
        build(estimate=None)


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_actual_none_is_still_the_default(flavour: str) -> None:
    """Only ``estimate`` is required: ``actual=None`` builds (the usage header, else the
    estimate, settles)."""
    build, _ = FLAVOURS[flavour]
    middleware = build(estimate=lambda request, body: 10, actual=None)
    assert isinstance(middleware, TokenBudgetMiddleware | WSGITokenBudgetMiddleware)
    assert middleware.actual is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_django_s_setting_with_estimate_none_is_refused_by_name(mode: str) -> None:
    """``RATEWARDEN_TOKEN_BUDGET = {"budget": ..., "estimate": None}`` is refused when Django
    builds the middleware, in either mode, naming the setting and ``estimate``."""

    async def awaited(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    def blocking(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    get_response: Any = awaited if mode == "async" else blocking
    setting = {"budget": ASYNC if mode == "async" else SYNC, "estimate": None}
    with (
        override_settings(ROOT_URLCONF=URLS, RATEWARDEN_TOKEN_BUDGET=setting),
        pytest.raises(ConfigurationError, match=f"RATEWARDEN_TOKEN_BUDGET: {SAYS}"),
    ):
        DjangoTokenBudgetMiddleware(get_response)
