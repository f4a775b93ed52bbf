"""Decorators where they would do nothing are refused, at the first request, by the resolvers
that list their app's routes; a decorator given twice on one view is refused where it is written.

Before, ``@limit`` on a method of a class view (Django ``View.get``, Flask ``MethodView.get``,
Starlette ``HTTPEndpoint.get``) or on a websocket endpoint was accepted and never applied; two
``@limit`` of one name both applied under one ambiguous header name, and of two ``@override``
of one rule the outer silently won.
"""

from __future__ import annotations

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from fastapi import FastAPI, WebSocket
from flask import Flask
from flask.views import MethodView
from starlette.applications import Starlette
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    flask_endpoint,
    limit,
    override,
)
from ratewarden.testing import ManualClock
from tests.middleware._helpers import ok, peer_client

RULES = [Rule("per-ip", "100/minute")]
METHOD = r"a rate limit decorator is on (\w+)\.get \(at (\S+)\), a method of a class view"


class MethodLimited(View):
    @limit("2/minute", name="get-only")
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("got")


@method_decorator(limit("1/minute", name="dispatched"), name="dispatch")
class Dispatched(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("got")


urlpatterns = [path("dispatched/", Dispatched.as_view())]
method_urlpatterns = [*urlpatterns, path("ml/", MethodLimited.as_view())]


class MethodUrls:
    urlpatterns = method_urlpatterns


def _django(urlconf: object) -> override_settings:
    clock = ManualClock()
    return override_settings(
        ROOT_URLCONF=urlconf,
        MIDDLEWARE=["ratewarden.middleware.django.DjangoRateLimitMiddleware"],
        RATEWARDEN_MIDDLEWARE={
            "limiter": Limiter(MemoryStore(clock=clock)),
            "rules": RuleSet(RULES, clock=clock),
        },
    )


def test_django_a_limit_on_a_view_method_is_refused_at_the_first_request() -> None:
    """``@limit`` on ``MethodLimited.get``: every request refused, naming the method and
    its route (before: GET /ml/ x4 all 200, only the global rule)."""
    with _django(MethodUrls), pytest.raises(ConfigurationError, match=METHOD) as refused:
        Client().get("/dispatched/")
    assert refused.match(r"MethodLimited\.get \(at /ml/\)")


def test_django_method_decorator_on_dispatch_is_no_method_of_a_class_view() -> None:
    """``method_decorator(limit(...), name="dispatch")`` applies (as_view copies it)."""
    with _django(__name__):
        client = Client()
        assert [client.get("/dispatched/").status_code for _ in range(2)] == [200, 429]


def test_flask_a_limit_on_a_method_view_s_method_is_refused() -> None:
    """Flask ``MethodView.get`` decorated: refused; the class decorated: applies."""

    class Things(MethodView):
        @limit("1/minute", name="things-get")
        def get(self) -> str:
            return "things"

    @limit("1/minute", name="items")
    class Items(MethodView):
        def get(self) -> str:
            return "items"

    def served(*views: tuple[str, type[MethodView]]) -> Flask:
        app = Flask(__name__)
        for url, view in views:
            app.add_url_rule(url, view_func=view.as_view(url.strip("/")))
        rules = RuleSet(RULES, clock=ManualClock(), resolver=flask_endpoint(app))
        app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, limiter=Limiter(MemoryStore()), rules=rules
        )
        return app

    with pytest.raises(ConfigurationError, match=r"Things\.get \(at /things\)"):
        served(("/things", Things), ("/items", Items)).test_client().get("/items")
    client = served(("/items", Items)).test_client()
    assert [client.get("/items").status_code for _ in range(2)] == [200, 429]


class Endpoint(HTTPEndpoint):
    @limit("1/minute", name="endpoint-get")
    async def get(self, request: Request) -> Response:
        return PlainTextResponse("got")


async def test_starlette_a_limit_on_an_http_endpoint_method_is_refused() -> None:
    app = Starlette(routes=[Route("/", ok), Route("/endpoint", Endpoint)])
    limiter = AsyncLimiter(AsyncMemoryStore())
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=RuleSet(RULES))
    async with peer_client(app) as client:
        with pytest.raises(ConfigurationError, match=r"Endpoint\.get \(at /endpoint\)"):
            await client.get("/")


async def test_fastapi_a_limit_on_a_websocket_endpoint_is_refused() -> None:
    """``@app.websocket`` with ``@limit``: refused at the first HTTP request, naming the
    endpoint and its path (before: three connections all accepted, without a word)."""
    app = FastAPI()

    @app.get("/")
    async def home() -> str:
        return "home"

    @app.websocket("/ws")
    @limit("1/minute", name="ws")
    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()

    limiter = AsyncLimiter(AsyncMemoryStore())
    app.add_middleware(RateLimitMiddleware, limiter=limiter, rules=RuleSet(RULES))
    async with peer_client(app) as client:
        with pytest.raises(ConfigurationError, match=r"websocket endpoint \S*socket at /ws"):
            await client.get("/")


def test_one_limit_name_twice_on_one_view_is_refused() -> None:
    """Two ``@limit`` of one name on a view: refused where written, saying to give both rates
    in one; two of different names stay allowed."""

    def view() -> str:
        return "v"

    limit("5/minute", name="dup")(view)
    with pytest.raises(ConfigurationError, match=r"@limit\(name='dup'\) is on .*view twice"):
        limit("1/second", name="dup")(view)
    limit("1/second", name="other")(view)


def test_one_override_twice_on_one_view_is_refused() -> None:
    def view() -> str:
        return "v"

    override("per-ip", cost=2)(view)
    with pytest.raises(ConfigurationError, match=r"@override\('per-ip'\) is on .*view twice"):
        override("per-ip", rates="1/second")(view)


def test_a_subclass_may_limit_again_the_name_its_base_limits() -> None:
    """The check is of one view's own decorators: a subclass of a limited view class may
    carry a ``@limit`` of the same name (both apply to it, as before)."""

    @limit("5/minute", name="export")
    class Base(View):
        pass

    @limit("1/second", name="export")
    class Child(Base):
        pass

    assert Child.__ratewarden__.rules[-1].rates != Base.__ratewarden__.rules[-1].rates  # type: ignore[attr-defined]
