"""The WSGI middleware in real Flask and Django apps, in process (their own test clients)."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from flask import Flask
from werkzeug.test import Client as WerkzeugClient

from ratewarden import Limiter, MemoryStore
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import (
    Rule,
    RuleSet,
    WSGIRateLimitMiddleware,
    by_api_key,
    by_client_ip,
    django_endpoint,
    exempt,
    flask_endpoint,
    limit,
    override,
)
from ratewarden.testing import ManualClock
from tests._django import configure_django
from tests.middleware._sfv import parse_list

if not settings.configured:
    configure_django()

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test.utils import override_settings
from django.urls import path
from django.views import View


def django_orders(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"orders": [], "method": request.method})


@exempt()
def django_health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@limit("1/minute", name="django-export")
class ExportView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("export")


urlpatterns = [
    path("orders", django_orders),
    path("health", django_health),
    path("export", ExportView.as_view()),
]


def _flask(ruleset_kwargs: dict[str, object], clock: ManualClock) -> Flask:
    app = Flask(__name__)

    @app.route("/items", methods=["GET", "POST"])
    def items() -> dict[str, str]:
        return {"items": "ok"}

    @app.route("/login", methods=["POST"])
    @limit("2/minute", name="flask-login")
    def login() -> str:
        return "welcome"

    @app.route("/bulk")
    @override("contract", cost=10)
    def bulk() -> str:
        return "bulk"

    @app.route("/health")
    @exempt()
    def health() -> str:
        return "ok"

    ruleset = RuleSet(clock=clock, resolver=flask_endpoint(app), **ruleset_kwargs)  # type: ignore[arg-type]
    limiter = Limiter(MemoryStore(clock=clock))
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=limiter, rules=ruleset)  # type: ignore[method-assign]
    return app


def test_flask_costs_layering_headers_and_429() -> None:
    """Flask: writes cost 5 on the contract, the per-IP backstop layers on top, 429 on excess."""
    clock = ManualClock()
    rules = [
        Rule("per-ip", "100/minute"),
        Rule("contract", "10/minute", key=by_api_key(), cost={"GET": 1, "POST": 5}),
    ]
    headers = HeaderOptions(legacy=True)
    client = _flask({"rules": rules, "headers": headers}, clock).test_client()
    key = {"X-Api-Key": "k1"}
    first = client.post("/items", headers=key)
    assert first.status_code == 200 and first.json == {"items": "ok"}
    assert parse_list(first.headers["RateLimit"])[0].params["r"] == 5
    assert first.headers["X-RateLimit-Remaining"] == "5"
    assert client.post("/items", headers=key).status_code == 200
    denied = client.get("/items", headers=key)
    assert denied.status_code == 429
    assert denied.headers["Retry-After"] == "6"
    assert denied.headers["Cache-Control"] == "no-store"
    assert denied.content_type == "application/problem+json"
    assert json.loads(denied.data)["policy"] == "contract"
    head = client.head("/items", headers=key)
    assert head.status_code == 429 and head.data == b""
    assert head.headers["Content-Length"] == denied.headers["Content-Length"]


def test_flask_route_decorators() -> None:
    """@limit, @override and @exempt on Flask views are found through the URL map."""
    clock = ManualClock()
    rules = [Rule("contract", "20/minute", key=by_api_key())]
    client = _flask({"rules": rules}, clock).test_client()
    for _ in range(5):
        assert "RateLimit" not in client.get("/health").headers
    assert client.post("/login").status_code == 200
    assert client.post("/login").status_code == 200
    assert client.post("/login").status_code == 429
    # Three contract units used by the logins; a bulk call costs 10.
    bulk = client.get("/bulk")
    assert bulk.status_code == 200 and parse_list(bulk.headers["RateLimit"])[0].params["r"] == 7
    assert client.get("/bulk").status_code == 429


def _django(rules: list[Rule], clock: ManualClock, **kwargs: object) -> WerkzeugClient:
    """Django's own WSGI handler behind the middleware, driven by a plain WSGI test client."""
    from django.core.handlers.wsgi import WSGIHandler

    ruleset = RuleSet(rules, clock=clock, resolver=django_endpoint, **kwargs)  # type: ignore[arg-type]
    limiter = Limiter(MemoryStore(clock=clock))
    return WerkzeugClient(WSGIRateLimitMiddleware(WSGIHandler(), limiter=limiter, rules=ruleset))


def _via(peer: str, forwarded: str | None = None) -> dict[str, object]:
    headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
    return {"headers": headers, "environ_base": {"REMOTE_ADDR": peer}}


# Other test modules may have configured Django first: point it at these views.
_OUR_URLS = override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])


@_OUR_URLS
def test_django_views_limits_and_trusted_proxy() -> None:
    """Django behind a trusted proxy: limited per forwarded client; class views carry @limit."""
    clock = ManualClock()
    client = _django(
        [Rule("per-client", "2/minute", paths=["/orders"])],
        clock,
        default_key=by_client_ip(["127.0.0.0/8"]),
    )
    hop = _via("127.0.0.1", "203.0.113.5")
    other = _via("127.0.0.1", "203.0.113.6")
    assert client.get("/orders", **hop).get_json()["orders"] == []  # type: ignore[arg-type]
    assert client.get("/orders", **hop).status_code == 200  # type: ignore[arg-type]
    assert client.get("/orders", **hop).status_code == 429  # type: ignore[arg-type]
    assert client.get("/orders", **other).status_code == 200  # type: ignore[arg-type]
    assert client.get("/export").status_code == 200
    export = client.get("/export")
    assert export.status_code == 429 and '"django-export"' in export.headers["RateLimit"]
    for _ in range(3):
        assert client.get("/health").status_code == 200


@_OUR_URLS
@pytest.mark.parametrize("method", ["get", "post"])
def test_django_untrusted_peer_forging_x_forwarded_for(method: str) -> None:
    """A direct client rotating forged X-Forwarded-For values is still limited by its address."""
    clock = ManualClock()
    client = _django(
        [Rule("per-client", "3/minute", paths=["/orders"])],
        clock,
        default_key=by_client_ip(["10.0.0.0/8"]),
    )
    codes = [
        client.open(
            "/orders", method=method.upper(), **_via("198.51.100.77", f"1.2.3.{i}")
        ).status_code  # type: ignore[arg-type]
        for i in range(5)
    ]
    assert codes == [200, 200, 200, 429, 429]
