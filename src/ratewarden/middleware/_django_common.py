"""What the Django middlewares share: their setting read, the mode check's words, the request as
the rules see it, and a refusal as Django's response.

Each Django middleware is configured by a setting of its own (a dict of the
ASGI and WSGI middlewares' keywords, some of which may be dotted paths), runs
in the mode Django picks for it (sync or async, from the ``get_response`` it is
handed), and refuses by name what does not fit that mode.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.conf import settings  # type: ignore[import-untyped]
from django.http import HttpResponse  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

from ratewarden.errors import ConfigurationError
from ratewarden.headers import Header
from ratewarden.middleware._holding import GetResponse
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._request import RequestInfo, from_wsgi

__all__ = [
    "DjangoRequest",
    "GetResponse",
    "add_headers",
    "find_user",
    "read_setting",
    "request_info",
    "respond",
    "wrong_mode",
]

#: How the refusals name the mode Django runs a middleware in, and what decides it.
SYNC_MODE = "in sync mode here (the WSGI handler, or a synchronous-only middleware listed after it)"
ASYNC_MODE = "in async mode here (the ASGI handler, with only async-capable middleware after it)"


class DjangoRequest(Mapping[str, Any]):
    """``RequestInfo.raw`` under the Django middleware: the request's ``META`` (the WSGI
    environ, as the WSGI middleware gives), with the ``HttpRequest`` itself as ``request``.

    ``user`` is the user ``await request.auser()`` found in async mode (a user or an
    ``AnonymousUser``), else None: an extractor of your own reads it there rather than
    ``request.user``, whose first use may query the database on the event loop.
    """

    __slots__ = ("request", "user")

    def __init__(self, request: Any) -> None:
        self.request = request
        self.user: Any = None

    def __getitem__(self, name: str) -> Any:
        return self.request.META[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.request.META)

    def __len__(self) -> int:
        return len(self.request.META)


def read_setting(
    setting: str,
    who: str,
    keys: Iterable[str],
    *,
    imported: Iterable[str],
    required: tuple[str, ...],
) -> dict[str, Any]:
    """The Django setting ``setting`` of middleware ``who``: a dict of ``keys``, the values of
    ``imported`` keys that are strings imported as dotted paths, ``required`` keys present.
    Anything else is a ConfigurationError naming the setting and the value."""
    keys = tuple(keys)
    given = getattr(settings, setting, None)
    if not isinstance(given, Mapping):
        names = " and ".join(repr(key) for key in required)
        what = (
            "(objects or dotted paths)" if len(required) > 1 else "(an object or its dotted path)"
        )
        raise ConfigurationError(
            f"{who} needs the Django setting {setting}, a dict with {names} {what}; found "
            f"{given!r}{_similar(setting) if given is None else ''}"
        )
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise ConfigurationError(
            f"{setting} has unknown keys {unknown}; it takes {', '.join(keys)}"
        )
    options = dict(given)
    paths = frozenset(imported)
    for key, value in given.items():
        if key in paths and isinstance(value, str):
            try:
                options[key] = import_string(value)
            except ImportError as exc:
                raise ConfigurationError(
                    f"{setting}[{key!r}]: cannot import {value!r} ({exc})"
                ) from None
    for key in required:
        if key not in options:
            raise ConfigurationError(f"{setting} needs {key!r} (an object or its dotted path)")
    return options


def _similar(setting: str) -> str:
    """`` (there is a setting X: a misspelling?)`` for a setting close to ``setting``."""
    close = difflib.get_close_matches(setting, [n for n in dir(settings) if n.isupper()], 1, 0.8)
    return f" (there is a setting {close[0]}: a misspelling?)" if close else ""


def wrong_mode(given: str, who: str, async_mode: bool, instead: str) -> ConfigurationError:
    """The refusal of an object that does not fit the mode Django runs ``who`` in: ``given``
    says what it is, ``instead`` what to use."""
    mode = ASYNC_MODE if async_mode else SYNC_MODE
    return ConfigurationError(f"{given}, and Django runs {who} {mode}: {instead}")


def request_info(request: Any, raw: DjangoRequest) -> RequestInfo:
    """The request as the rules see it: ``META`` as the WSGI middleware reads the environ."""
    found = from_wsgi(request.META)
    return RequestInfo(found.method, request.path_info or "/", found.peer, found.headers, raw)


async def find_user(request: Any, raw: DjangoRequest) -> None:
    """Async mode: the user ``AuthenticationMiddleware``'s ``request.auser()`` finds, kept as
    ``raw.user`` (its lazy ``request.user`` would query the database on the event loop)."""
    auser = getattr(request, "auser", None)
    if auser is not None:
        raw.user = await auser()


def respond(outcome: Outcome, head: bool) -> Any:
    """A blocked ``outcome`` as Django's response; a HEAD gets the headers and no body."""
    return add_headers(
        HttpResponse(b"" if head else outcome.body, status=outcome.status), outcome.headers
    )


def add_headers(response: Any, headers: Iterable[Header]) -> Any:
    """``response`` with ``headers`` set on it."""
    for name, value in headers:
        response.headers[name] = value
    return response
