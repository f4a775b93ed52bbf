"""Finding a request's endpoint, whose decorators (``_decorators``) change the rules.

The middleware learns a request's endpoint through a resolver: a callable of
the ``RequestInfo`` returning the endpoint or None. ``starlette_endpoint``
(Starlette, FastAPI; the ASGI default), ``flask_endpoint(app)`` and
``django_endpoint`` match the framework's own routing table, so the answer is
the view the framework itself will call. Each also lists its app's decorated
routes (a ``Catalog``), which the rule set checks at the first request. None of
them imports its framework until it is called.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.middleware._catalog import Catalog, Declared, catalog_entries, lists_routes
from ratewarden.middleware._decorators import (
    Override,
    RouteLimits,
    declared_rule_names,
    exempt,
    limit,
    override,
    route_limits,
)
from ratewarden.middleware._django_routes import django_endpoint
from ratewarden.middleware._request import RequestInfo

__all__ = [
    "Override",
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

#: Finds the endpoint that will serve a request, or None.
Resolver = Callable[[RequestInfo], object | None]


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


@dataclass(slots=True)
class _Walk:
    """What a walk of an app's routes gathers: every routing table under it (for noticing
    later that one grew), its decorated routes and its misplaced decorators."""

    tables: list[Sequence[Any]]
    routes: list[Declared]
    dead: list[str]


def _walk(routes: Sequence[Any], found: _Walk, prefix: str = "") -> None:
    from starlette.routing import WebSocketRoute

    for route in routes:
        served = _served(route)
        where = prefix + str(getattr(served, "path", "") or getattr(served, "host", ""))
        endpoint = getattr(served, "endpoint", None)
        if endpoint is not None:
            websocket = isinstance(served, WebSocketRoute)
            catalog_entries(where or "/", endpoint, found.routes, found.dead, websocket)
        included = getattr(route, "original_router", None)
        own = getattr(included, "routes", None) if included is not None else None
        if isinstance(own, list):
            found.tables.append(own)
        elif isinstance(getattr(served, "routes", None), list):
            found.tables.append(served.routes)
        # An included router's routes carry their prefix; a mount's do not.
        _walk(_inner(served), found, prefix if included is not None else where)


@dataclass(frozen=True, slots=True)
class _Known:
    """What the walk of one app found: the sizes of its routing tables then (its own, and
    each one under it with its size), and its decorated routes."""

    size: int
    tables: tuple[tuple[Sequence[Any], int], ...]
    catalog: Catalog

    def current(self, routes: Sequence[Any]) -> bool:
        # The app's own table by length only: ``app.routes`` may be a new list each time.
        if len(routes) != self.size:
            return False
        return not self.tables or all(len(t) == n for t, n in self.tables)


def _know(routes: Sequence[Any]) -> _Known:
    found = _Walk([], [], [])
    _walk(routes, found)
    catalog = Catalog(tuple(found.routes), tuple(found.dead))
    return _Known(len(routes), tuple((t, len(t)) for t in found.tables), catalog)


# Per app. Most apps have few decorated routes or none, and then no request needs the walk.
# Walked again when a table grows: the app's own, an included router's or a mount's.
_decorated: weakref.WeakKeyDictionary[Any, _Known] = weakref.WeakKeyDictionary()


# The last app asked about, by weak reference, and its answer: one process serves one app,
# and a WeakKeyDictionary lookup makes a new weak reference on every call.
_last: list[tuple[weakref.ref[Any], _Known] | None] = [None]


def _known_of(app: Any, routes: Sequence[Any]) -> _Known:
    last = _last[0]
    if last is not None and last[0]() is app and last[1].current(routes):
        return last[1]
    try:
        known = _decorated.get(app)
    except TypeError:  # not weakly referenceable: no caching
        return _know(routes)
    if known is None or not known.current(routes):
        known = _know(routes)
        _decorated[app] = known
    _last[0] = (weakref.ref(app), known)
    return known


def starlette_endpoint(request: RequestInfo) -> object | None:
    """The Starlette/FastAPI endpoint for the request, from ``scope["app"].routes``
    (through mounts and, in FastAPI, included routers).

    Returns None at once when no route of the app carries ratewarden metadata
    (checked once per app, again when one of its routing tables grows).
    """
    app = request.raw.get("app")
    routes = getattr(app, "routes", None)
    if not routes or not _known_of(app, routes).catalog.decorated:
        return None
    return _starlette_match(routes, request.raw)[1]


def _starlette_catalog(request: RequestInfo) -> Catalog | None:
    app = request.raw.get("app")
    routes = getattr(app, "routes", None)
    return _known_of(app, routes).catalog if routes else None


lists_routes(starlette_endpoint, _starlette_catalog)


def undecorated(scope: Mapping[str, Any]) -> bool:
    """True when ``starlette_endpoint`` finds no ratewarden metadata for any request of the
    scope's app (no route of it is decorated), so that no route changes the rules."""
    app = scope.get("app")
    routes = getattr(app, "routes", None)
    return not routes or not _known_of(app, routes).catalog.decorated


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

    # Flask takes no new route once it has served a request: one walk per table size.
    walked: list[tuple[int, Catalog]] = []

    def catalog(request: RequestInfo) -> Catalog:
        size = len(app.view_functions)
        if not walked or walked[0][0] != size:
            routes: list[Declared] = []
            dead: list[str] = []
            for rule in app.url_map.iter_rules():
                view = app.view_functions.get(rule.endpoint)
                if view is not None:
                    catalog_entries(rule.rule, view, routes, dead)
            walked[:] = [(size, Catalog(tuple(routes), tuple(dead)))]
        return walked[0][1]

    lists_routes(resolve, catalog)
    return resolve
