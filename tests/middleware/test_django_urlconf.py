"""Routes a per-request ``urlconf`` picks (a middleware before sets ``request.urlconf`` per
host, as django-hosts does) carry their decorators under the Django middleware."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import override_settings
from django.urls import path

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import Limiter, MemoryStore
from ratewarden.middleware import Rule, RuleSet, exempt, limit
from ratewarden.testing import ManualClock


@exempt()
def www_home(request: HttpRequest) -> HttpResponse:
    return HttpResponse("www")


@limit("1/minute", name="api-home")
def api_home(request: HttpRequest) -> HttpResponse:
    return HttpResponse("api")


urlpatterns = [path("", www_home)]


class ApiUrls:
    """The api host's urlconf (any object with ``urlpatterns`` serves; usually a module)."""

    urlpatterns = (path("", api_home),)


class HostUrlconf:
    """Serves ``api.*`` hosts from ``ApiUrls``, as django-hosts does from its host table."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.get_host().startswith("api."):
            request.urlconf = ApiUrls  # type: ignore[attr-defined]
        return self.get_response(request)


def test_the_request_s_urlconf_picks_the_view_whose_decorators_apply() -> None:
    """On the api host "/" is api_home (@limit 1/minute): the second request is denied by
    that rule. On the www host "/" is www_home (@exempt): never limited. Before, the route
    was looked up in ROOT_URLCONF only: the api host's "/" was taken as the exempt view."""
    clock = ManualClock()
    rules = RuleSet([Rule("per-ip", "5/minute")], clock=clock)
    with override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[
            f"{__name__}.HostUrlconf",
            "ratewarden.middleware.django.DjangoRateLimitMiddleware",
        ],
        RATEWARDEN_MIDDLEWARE={"limiter": Limiter(MemoryStore(clock=clock)), "rules": rules},
    ):
        api = Client(HTTP_HOST="api.example.com")
        first = api.get("/")
        assert first.content == b"api" and '"api-home"' in first["RateLimit-Policy"]
        second = api.get("/")
        assert second.status_code == 429 and '"api-home"' in second["RateLimit"]
        www = Client(HTTP_HOST="www.example.com")
        for _ in range(7):
            answer = www.get("/")
            assert answer.content == b"www" and "RateLimit" not in answer
