"""``django_endpoint``: the Django view that will serve a request, as Django's handler finds it.

Two things about the request decide that beyond its path: the ``urlconf`` a
middleware may have set on it (per host or tenant, as django-hosts does), and,
under ``i18n_patterns``, the language. Django's ``LocalePrefixPattern`` matches
the prefix of the language active when it resolves, which ``LocaleMiddleware``
sets from the path; the rate limit middleware may run before it (the WSGI and
ASGI middlewares always do), when the thread's active language is whatever the
previous request left. So a path under ``i18n_patterns`` is resolved under the
language it names (``/fr/...``: French), or else ``LANGUAGE_CODE``, as
``LocaleMiddleware`` activates for it.
"""

from __future__ import annotations

import weakref
from typing import Any

from ratewarden.middleware._catalog import Catalog, Declared, catalog_entries, lists_routes
from ratewarden.middleware._request import RequestInfo

__all__ = ["django_endpoint"]


class _Table:
    """What one URL resolver holds for the rate limit: whether it uses ``i18n_patterns``,
    and its decorated views (walked once, at the first request)."""

    __slots__ = ("_catalog", "i18n", "resolver")

    def __init__(self, resolver: Any) -> None:
        from django.urls import LocalePrefixPattern  # type: ignore[import-untyped]

        self.resolver = resolver
        self.i18n = any(isinstance(p.pattern, LocalePrefixPattern) for p in resolver.url_patterns)
        self._catalog: Catalog | None = None

    def catalog(self) -> Catalog:
        if self._catalog is None:
            routes: list[Declared] = []
            dead: list[str] = []
            _walk(self.resolver.url_patterns, "/", routes, dead)
            self._catalog = Catalog(tuple(routes), tuple(dead))
        return self._catalog


def _walk(patterns: Any, prefix: str, routes: list[Declared], dead: list[str]) -> None:
    for pattern in patterns:
        where = prefix + str(pattern.pattern)
        inner = getattr(pattern, "url_patterns", None)
        if inner is not None:
            _walk(inner, where, routes, dead)
        else:
            catalog_entries(where, pattern.callback, routes, dead)


# Per URL resolver (Django makes one per urlconf and keeps it until the URL caches clear).
_tables: weakref.WeakKeyDictionary[Any, _Table] = weakref.WeakKeyDictionary()


def _table(request: RequestInfo) -> _Table:
    from django.urls import get_resolver

    # Under the Django middleware ``raw.request`` is the HttpRequest; under the WSGI
    # middleware no middleware has run yet, and there is none.
    urlconf = getattr(getattr(request.raw, "request", None), "urlconf", None)
    resolver = get_resolver(urlconf)
    table = _tables.get(resolver)
    if table is None:
        table = _tables[resolver] = _Table(resolver)
    return table


def django_endpoint(request: RequestInfo) -> object | None:
    """The Django view Django's handler will call for the request: resolved in the request's
    own ``urlconf`` when a middleware before has set one, as Django's handler will, else in
    ``ROOT_URLCONF``; under ``i18n_patterns``, in the language the path names (else
    ``LANGUAGE_CODE``), whatever language the thread last activated."""
    from django.urls import Resolver404

    table = _table(request)
    try:
        if not table.i18n:
            view: object = table.resolver.resolve(request.path).func
            return view
        from django.conf import settings  # type: ignore[import-untyped]
        from django.utils import translation  # type: ignore[import-untyped]

        language = translation.get_language_from_path(request.path) or settings.LANGUAGE_CODE
        with translation.override(language):
            view = table.resolver.resolve(request.path).func
        return view
    except Resolver404:
        return None


def _catalog(request: RequestInfo) -> Catalog:
    return _table(request).catalog()


lists_routes(django_endpoint, _catalog)
