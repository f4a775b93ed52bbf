"""Every decorated route of an app, checked against a rule set once, at the first request.

A decorator mistake that only shows when its route is called (``@exempt("per_ip")``
where the rule is ``per-ip``, on a health check) fails every request to that
route, and only once the route is called. A resolver that can list its app's
routes (``starlette_endpoint``, ``django_endpoint``, ``flask_endpoint(app)``)
gives a ``Catalog`` of them, and the rule set checks it at the first request,
and again whenever a new catalog is made (a routing table grew):

- ``@exempt`` and ``@override`` must name rules of the rule set, and ``@limit``
  must not take a global rule's name;
- decorators on what the router never calls are refused: a method of a class
  view (decorate the class) and a websocket endpoint (websocket scopes pass
  through the middleware untouched).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.middleware._decorators import ATTRIBUTE, RouteLimits, route_limits
from ratewarden.middleware._request import RequestInfo

__all__ = ["Catalog", "Declared", "catalog_entries", "checked", "lists_routes", "route_catalog"]

#: The methods class-based views dispatch to (Django's ``View``, Flask's ``MethodView``,
#: Starlette's ``HTTPEndpoint``).
_HTTP_METHODS = ("get", "head", "post", "put", "patch", "delete", "options", "trace")
#: The attribute a resolver carries when it can list its app's routes.
_LISTS = "__ratewarden_catalog__"


@dataclass(frozen=True, slots=True)
class Declared:
    """One decorated route: where it is served (its path pattern) and its metadata."""

    where: str
    limits: RouteLimits


@dataclass(frozen=True, slots=True, eq=False)
class Catalog:
    """The decorated routes of one app as walked once, and the decorators that would do
    nothing (each a sentence saying where and what to do instead)."""

    routes: tuple[Declared, ...] = ()
    dead: tuple[str, ...] = ()

    @property
    def decorated(self) -> bool:
        """Whether any route of the app carries a decorator (or one is misplaced)."""
        return bool(self.routes or self.dead)


def catalog_entries(
    where: str, endpoint: object, routes: list[Declared], dead: list[str], websocket: bool = False
) -> None:
    """Add what ``endpoint``, served at ``where``, carries to ``routes`` or ``dead``."""
    found = route_limits(endpoint)
    if websocket:
        if found is not None:
            dead.append(
                f"a rate limit decorator is on the websocket endpoint {_named(endpoint)} at "
                f"{where}, where it does nothing: the middleware passes websocket connections "
                "through; limit the connections in the endpoint itself"
            )
        return
    if found is not None:
        routes.append(Declared(where, found))
    view_class = endpoint if inspect.isclass(endpoint) else getattr(endpoint, "view_class", None)
    if inspect.isclass(view_class):
        for method in _HTTP_METHODS:
            function = getattr(view_class, method, None)
            if ATTRIBUTE in getattr(function, "__dict__", {}):
                dead.append(
                    f"a rate limit decorator is on {view_class.__qualname__}.{method} (at "
                    f"{where}), a method of a class view, where it does nothing: decorate the "
                    "class, or split the methods into views of their own"
                )


def _named(endpoint: object) -> str:
    return str(getattr(endpoint, "__qualname__", None) or repr(endpoint))


def lists_routes(resolver: Callable[..., object], catalog: Callable[[RequestInfo], Any]) -> None:
    """Mark ``resolver`` as able to list its app's routes with ``catalog(request)``."""
    setattr(resolver, _LISTS, catalog)


def route_catalog(resolver: Callable[..., object], request: RequestInfo) -> Catalog | None:
    """The catalog of the app serving ``request``, or None when ``resolver`` cannot list it."""
    catalog = getattr(resolver, _LISTS, None)
    return None if catalog is None else catalog(request)


def checked(catalog: Catalog, names: Iterable[str]) -> Catalog:
    """``catalog``, when its decorators fit a rule set of rules ``names``; else the
    ``ConfigurationError`` the first misfit makes."""
    if catalog.dead:
        raise ConfigurationError(catalog.dead[0])
    known = frozenset(names)
    for route in catalog.routes:
        meta = route.limits
        for what, named in (("exempt", meta.exempt), ("override", meta.overrides)):
            unknown = sorted(set(named) - known)
            if unknown:
                raise ConfigurationError(
                    f"@{what}({', '.join(map(repr, unknown))}) on {route.where} names no rule "
                    f"of the RuleSet; its rules: {sorted(known)}"
                )
        for rule in meta.rules:
            if rule.name in known:
                raise ConfigurationError(
                    f"@limit rule {rule.name!r} on {route.where} has the name of a global rule"
                )
    return catalog
