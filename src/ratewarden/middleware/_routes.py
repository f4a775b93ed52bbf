"""Per-route opt-out and overrides: decorators on endpoints, and finding a request's endpoint.

The decorators only attach metadata (``__ratewarden__``) and return the same
function, so they work on Starlette and FastAPI endpoints, Flask views and
Django views (function views, or the function ``View.as_view()`` returns)::

    @exempt()                                   # no rule applies here
    @exempt("per-ip")                           # these rules skip this route
    @limit("5/minute", name="login")            # an extra rule for this route only
    @override("contract", cost=5)               # a global rule, changed here

The middleware learns a request's endpoint through a resolver: a callable of
the ``RequestInfo`` returning the endpoint or None. ``starlette_endpoint``
(Starlette, FastAPI; the ASGI default), ``flask_endpoint(app)`` and
``django_endpoint`` match the framework's own routing table, so the answer is
the view the framework itself will call. None of them imports its framework
until it is called.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ratewarden.errors import ConfigurationError
from ratewarden.middleware._denied import DeniedHook
from ratewarden.middleware._identity import ANONYMOUS, KeyFunc, calls_checked
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._rules import CostFunc, Rule, check_name
from ratewarden.rate import Rate

__all__ = [
    "Resolver",
    "RouteLimits",
    "declared_rule_names",
    "django_endpoint",
    "exempt",
    "flask_endpoint",
    "limit",
    "override",
    "route_limits",
    "starlette_endpoint",
    "undecorated",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Finds the endpoint that will serve a request, or None.
Resolver = Callable[[RequestInfo], object | None]

_ATTRIBUTE = "__ratewarden__"
_declared: set[str] = set()
_declared_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Override:
    """New rates and/or cost for one global rule on one route."""

    rates: str | Rate | Sequence[str | Rate] | None = None
    cost: int | Mapping[str, int] | CostFunc | None = None


@dataclass(frozen=True, slots=True)
class RouteLimits:
    """What the decorators on one endpoint say."""

    exempt_all: bool = False
    exempt: frozenset[str] = frozenset()
    rules: tuple[Rule, ...] = ()
    overrides: Mapping[str, Override] = field(default_factory=dict)


def declared_rule_names() -> frozenset[str]:
    """Names of the rules declared with ``@limit`` so far (for kill-switch name checks)."""
    with _declared_lock:
        return frozenset(_declared)


def route_limits(endpoint: object) -> RouteLimits | None:
    """The metadata on ``endpoint`` (or on its ``view_class``, for Django class views)."""
    for holder in (endpoint, getattr(endpoint, "view_class", None)):
        found = getattr(holder, _ATTRIBUTE, None)
        if isinstance(found, RouteLimits):
            return found
    return None


def _attach(func: F, change: Callable[[RouteLimits], RouteLimits]) -> F:
    if not callable(func):
        raise ConfigurationError(f"rate limit decorators apply to views; got {func!r}")
    current = route_limits(func) if hasattr(func, _ATTRIBUTE) else None
    setattr(func, _ATTRIBUTE, change(current or RouteLimits()))
    return func


def exempt(*rule_names: str) -> Callable[[F], F]:
    """Opt a route out of every rule (no names) or of the named rules."""
    names = frozenset(check_name(n) for n in rule_names)

    def decorate(func: F) -> F:
        if not names:
            return _attach(func, lambda meta: replace(meta, exempt_all=True))
        return _attach(func, lambda meta: replace(meta, exempt=meta.exempt | names))

    return decorate


@calls_checked
def limit(
    rates: str | Rate | Sequence[str | Rate],
    *,
    name: str,
    key: KeyFunc | None = None,
    cost: int | Mapping[str, int] | CostFunc = 1,
    shadow: bool = False,
    fallback: str = ANONYMOUS,
    denied: DeniedHook | None = None,
) -> Callable[[F], F]:
    """Add a rule that applies to this route only (after the global rules).

    Routes decorated with the same ``name`` and rates share one budget.
    ``denied``: the answer to a request it denies, as ``Rule``'s.
    """
    rule = Rule(name, rates, key=key, cost=cost, shadow=shadow, fallback=fallback, denied=denied)
    with _declared_lock:
        _declared.add(rule.name)

    def decorate(func: F) -> F:
        return _attach(func, lambda meta: replace(meta, rules=(*meta.rules, rule)))

    return decorate


@calls_checked
def override(
    rule_name: str,
    *,
    rates: str | Rate | Sequence[str | Rate] | None = None,
    cost: int | Mapping[str, int] | CostFunc | None = None,
) -> Callable[[F], F]:
    """Change a global rule's rates and/or cost on this route.

    A cost override shares the rule's budget; a rates override is a separate
    budget for this route (state is kept per rate).
    """
    check_name(rule_name)
    if rates is None and cost is None:
        raise ConfigurationError(f"override({rule_name!r}) needs rates=, cost= or both")
    # Validate now, at import time, rather than on the first request.
    Rule(
        rule_name, rates if rates is not None else "1/second", cost=cost if cost is not None else 1
    )
    change = Override(rates, cost)

    def decorate(func: F) -> F:
        return _attach(
            func, lambda meta: replace(meta, overrides={**meta.overrides, rule_name: change})
        )

    return decorate


def _inner(route: Any) -> Sequence[Any]:
    """The routes a route holds: a Mount's or Router's ``routes``, or, for the node FastAPI
    (0.165 and later) puts in the table for an included ``APIRouter``, its routes as that
    inclusion serves them (prefix applied)."""
    effective = getattr(route, "effective_candidates", None)
    if callable(effective):
        return effective()  # type: ignore[no-any-return]
    return getattr(route, "routes", None) or ()


def _served(route: Any) -> Any:
    """The route that answers for ``route``: FastAPI's entry for a Starlette ``Route`` or
    ``Mount`` of an included router holds the prefixed copy as ``starlette_route``."""
    return getattr(route, "starlette_route", None) or route


def _starlette_match(routes: Sequence[Any], scope: Mapping[str, Any]) -> tuple[bool, object]:
    """(whether one of ``routes`` takes the request, the endpoint it leads to or None)."""
    from starlette.routing import Match

    for route in routes:
        if callable(getattr(route, "effective_candidates", None)):
            # An included router takes the request when one of its routes does; matched
            # route by route, as its own matches() would.
            taken, endpoint = _starlette_match(_inner(route), scope)
            if taken:
                return True, endpoint
            continue
        match, child = route.matches(scope)
        if match is not Match.FULL:
            continue
        served = _served(route)
        endpoint = getattr(served, "endpoint", None)
        if endpoint is not None:
            return True, endpoint
        return True, _starlette_match(_inner(served), {**scope, **child})[1]
    return False, None


def _walk(routes: Sequence[Any], tables: list[Sequence[Any]]) -> bool:
    """Whether any endpoint under ``routes`` is decorated; adds to ``tables`` every routing
    table walked (for noticing later that one grew)."""
    found = False
    for route in routes:
        served = _served(route)
        if route_limits(getattr(served, "endpoint", None)) is not None:
            found = True
        included = getattr(route, "original_router", None)
        own = getattr(included, "routes", None) if included is not None else None
        if isinstance(own, list):
            tables.append(own)
        elif isinstance(getattr(served, "routes", None), list):
            tables.append(served.routes)
        if _walk(_inner(served), tables):
            found = True
    return found


@dataclass(frozen=True, slots=True)
class _Known:
    """What the walk of one app found: the sizes of its routing tables then (its own, and
    each one under it with its size), and whether any endpoint is decorated."""

    size: int
    tables: tuple[tuple[Sequence[Any], int], ...]
    decorated: bool

    def current(self, routes: Sequence[Any]) -> bool:
        # The app's own table by length only: ``app.routes`` may be a new list each time.
        if len(routes) != self.size:
            return False
        return not self.tables or all(len(t) == n for t, n in self.tables)


def _know(routes: Sequence[Any]) -> _Known:
    tables: list[Sequence[Any]] = []
    decorated = _walk(routes, tables)
    return _Known(len(routes), tuple((t, len(t)) for t in tables), decorated)


# Per app. Most apps have few decorated routes or none, and then no request needs the walk.
# Walked again when a table grows: the app's own, an included router's or a mount's.
_decorated: weakref.WeakKeyDictionary[Any, _Known] = weakref.WeakKeyDictionary()


# The last app asked about, by weak reference, and its answer: one process serves one app,
# and a WeakKeyDictionary lookup makes a new weak reference on every call.
_last: list[tuple[weakref.ref[Any], _Known] | None] = [None]


def _any_decorated(app: Any, routes: Sequence[Any]) -> bool:
    last = _last[0]
    if last is not None and last[0]() is app and last[1].current(routes):
        return last[1].decorated
    try:
        known = _decorated.get(app)
    except TypeError:  # not weakly referenceable: no caching
        return _know(routes).decorated
    if known is None or not known.current(routes):
        known = _know(routes)
        _decorated[app] = known
    _last[0] = (weakref.ref(app), known)
    return known.decorated


def starlette_endpoint(request: RequestInfo) -> object | None:
    """The Starlette/FastAPI endpoint for the request, from ``scope["app"].routes``
    (through mounts and, in FastAPI, included routers).

    Returns None at once when no route of the app carries ratewarden metadata
    (checked once per app, again when one of its routing tables grows).
    """
    app = request.raw.get("app")
    routes = getattr(app, "routes", None)
    if not routes or not _any_decorated(app, routes):
        return None
    return _starlette_match(routes, request.raw)[1]


def undecorated(scope: Mapping[str, Any]) -> bool:
    """True when ``starlette_endpoint`` finds no ratewarden metadata for any request of the
    scope's app (no route of it is decorated), so that no route changes the rules."""
    app = scope.get("app")
    routes = getattr(app, "routes", None)
    return not routes or not _any_decorated(app, routes)


def flask_endpoint(app: Any) -> Resolver:
    """A resolver for a Flask app: the view function its URL map picks."""

    def resolve(request: RequestInfo) -> object | None:
        from werkzeug.exceptions import HTTPException
        from werkzeug.routing import RequestRedirect

        adapter = app.url_map.bind_to_environ(request.raw)
        try:
            endpoint, _args = adapter.match()
        except (HTTPException, RequestRedirect):
            return None
        view: object | None = app.view_functions.get(endpoint)
        return view

    return resolve


def django_endpoint(request: RequestInfo) -> object | None:
    """The Django view ``django.urls.resolve`` picks for the request path: in the request's
    own ``urlconf`` when a middleware before has set one (per host or tenant, as
    django-hosts does), as Django's handler will, else in ``ROOT_URLCONF``."""
    from django.urls import Resolver404, resolve  # type: ignore[import-untyped]

    # Under the Django middleware ``raw.request`` is the HttpRequest; under the WSGI
    # middleware no middleware has run yet, and there is none.
    urlconf = getattr(getattr(request.raw, "request", None), "urlconf", None)
    try:
        view: object = resolve(request.path, urlconf=urlconf).func
        return view
    except Resolver404:
        return None
