"""``DjangoRateLimitMiddleware``: the rate limit middleware inside Django's own middleware stack.

The WSGI middleware wraps the whole Django application, so it runs before any
of Django's middleware: it cannot see ``request.user``. This one is a Django
middleware, listed in ``MIDDLEWARE`` after ``AuthenticationMiddleware``, so a
rule can count the signed-in user (``by_user(django_user)``)::

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "ratewarden.middleware.django.DjangoRateLimitMiddleware",
    ]
    RATEWARDEN_MIDDLEWARE = {
        "limiter": "myproject.limits.limiter",  # an object, or its dotted path
        "rules": "myproject.limits.rules",
        "failure_mode": "open",
    }

The keys of ``RATEWARDEN_MIDDLEWARE`` are the WSGI middleware's keywords
(``limiter``, ``rules``, ``failure_mode``, ``metrics``, ``name``); a value
may be the object or its dotted path. Routes are found with ``django_endpoint``
unless the rule set has a resolver. The decision is the same sans-I/O core as
the WSGI middleware's, over a blocking limiter (``Limiter`` or ``TwoTier``).
Under Django's ASGI handler Django runs it in a thread, as any synchronous
middleware.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings  # type: ignore[import-untyped]
from django.http import HttpResponse  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.middleware._base import RateLimitBase
from ratewarden.middleware._compiled import Hitter
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._request import RequestInfo, from_wsgi
from ratewarden.middleware._routes import django_endpoint

__all__ = ["SETTING", "DjangoRateLimitMiddleware", "DjangoRequest", "django_user"]

#: The Django setting the middleware reads.
SETTING = "RATEWARDEN_MIDDLEWARE"
_KEYS = ("limiter", "rules", "failure_mode", "metrics", "name")

GetResponse = Callable[[Any], Any]


class DjangoRequest(Mapping[str, Any]):
    """``RequestInfo.raw`` under the Django middleware: the request's ``META`` (the WSGI
    environ, as the WSGI middleware gives), with the ``HttpRequest`` itself as ``request``."""

    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request

    def __getitem__(self, name: str) -> Any:
        return self.request.META[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.request.META)

    def __len__(self) -> int:
        return len(self.request.META)


def django_user(request: RequestInfo) -> object | None:
    """The signed-in Django user's primary key, for ``by_user(django_user)``; None for an
    anonymous user, or outside the Django middleware (the rule's ``fallback`` then)."""
    raw = request.raw
    if not isinstance(raw, DjangoRequest):
        return None
    user = getattr(raw.request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    found: object | None = getattr(user, "pk", None)
    return found


def _options() -> dict[str, Any]:
    given = getattr(settings, SETTING, None)
    if not isinstance(given, Mapping):
        raise ConfigurationError(
            f"DjangoRateLimitMiddleware needs the Django setting {SETTING}, a dict with "
            f"'limiter' and 'rules' (objects or dotted paths); found {given!r}"
        )
    unknown = sorted(set(given) - set(_KEYS))
    if unknown:
        raise ConfigurationError(
            f"{SETTING} has unknown keys {unknown}; it takes {', '.join(_KEYS)}"
        )
    options: dict[str, Any] = {}
    for key, value in given.items():
        options[key] = value
        if isinstance(value, str) and key in ("limiter", "rules", "metrics"):
            try:
                options[key] = import_string(value)
            except ImportError as exc:
                raise ConfigurationError(
                    f"{SETTING}[{key!r}]: cannot import {value!r} ({exc})"
                ) from None
    for key in ("limiter", "rules"):
        if key not in options:
            raise ConfigurationError(f"{SETTING} needs {key!r} (an object or its dotted path)")
    return options


def _response(outcome: Outcome, head: bool) -> Any:
    """A blocked ``outcome`` as Django's response; a HEAD gets the headers and no body."""
    response = HttpResponse(b"" if head else outcome.body, status=outcome.status)
    for name, value in outcome.headers:
        response.headers[name] = value
    return response


class DjangoRateLimitMiddleware(RateLimitBase[GetResponse, Hitter]):
    """Limit requests to Django's views by the rules of ``settings.RATEWARDEN_MIDDLEWARE``.

    ``failure_mode``, ``metrics`` and ``name``: as ``WSGIRateLimitMiddleware``'s.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: GetResponse) -> None:
        super().__init__(get_response, **_options())

    def __call__(self, request: Any) -> Any:
        found = from_wsgi(request.META)
        info = RequestInfo(
            found.method,
            request.path_info or "/",
            found.peer,
            found.headers,
            DjangoRequest(request),
        )
        rules = self.rules.applicable(info, django_endpoint)
        if not rules:
            return self.app(request)
        try:
            outcome = self.rules.decide(info, rules, self.limiter.hit, self.own_answer)
        except StorageError as exc:
            outcome = self.failed(exc, rules)
        if outcome.blocked:
            return _response(outcome, head=info.method == "HEAD")
        response = self.app(request)
        for name, value in outcome.headers:
            response.headers[name] = value
        return response
