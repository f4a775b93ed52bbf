"""``RequestInfo``: the few facts about an HTTP request that rate limiting reads.

Built once per request from an ASGI scope or a WSGI environ, so the rules,
identity extractors and route lookups are written once for both.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ratewarden.middleware._types import Message, Receive

__all__ = [
    "ClientGoneError",
    "RequestInfo",
    "from_asgi",
    "from_wsgi",
    "first_value",
    "header_value",
    "list_value",
    "read_body",
    "replay",
    "route_path",
]


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """An HTTP request as rate limiting sees it.

    ``headers`` has lower-case names, and a name gives what the app's own lookup
    gives: under ASGI the first of repeated lines, as Starlette's
    ``request.headers`` and FastAPI's ``Header()`` read it; under WSGI the
    environ's value, in which the server has joined repeated lines. So a key
    extractor reads the credential the app authenticates, and a client that
    repeats its ``X-Api-Key`` is not a new identity. ``list_value`` reads a list
    field such as ``X-Forwarded-For`` whole. ``peer`` is the address of the socket's other end,
    or None when the server does not know it (a Unix socket). ``raw`` is the
    ASGI scope or WSGI environ, for extractors that need the framework's view
    (an authenticated user, a session).
    """

    method: str
    path: str
    peer: str | None
    headers: Mapping[str, str]
    raw: Mapping[str, Any]


@functools.lru_cache(maxsize=256)
def _wanted(name: str) -> bytes:
    return name.lower().encode("latin-1")


def first_value(raw: Iterable[tuple[bytes, bytes]], wanted: bytes) -> str | None:
    """Header ``wanted`` (lower-case bytes) of an ASGI header list: its first line, as
    Starlette's ``Headers.get`` reads it."""
    size = len(wanted)
    for name, value in raw:
        if len(name) == size and (name == wanted or name.lower() == wanted):
            return value.decode("latin-1")
    return None


def header_value(raw: Iterable[tuple[bytes, bytes]], wanted: bytes) -> str | None:
    """Header ``wanted`` (lower-case bytes) of an ASGI header list, repeated lines joined
    with ``", "`` in order: a list field (``X-Forwarded-For``) read whole."""
    size = len(wanted)
    # Servers send lower-case names (ASGI asks for it); the length test skips lower()
    # for the names that cannot match.
    found = None
    for name, value in raw:
        if len(name) == size and (name == wanted or name.lower() == wanted):
            found = value if found is None else found + b", " + value
    return None if found is None else found.decode("latin-1")


class ASGIHeaders(Mapping[str, str]):
    """The scope's header list as a read-only mapping, decoded only as far as it is read.

    A rule usually reads one or two headers; decoding all of them for every
    request would cost more than the lookup. Names are matched case-blind.
    """

    __slots__ = ("_decoded", "_raw")

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._decoded: dict[str, str] | None = None

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        """The header's first line (as Starlette reads it), or ``default``."""
        if self._decoded is not None:
            return self._decoded.get(name, default)
        found = first_value(self._raw, _wanted(name))
        return default if found is None else found

    def joined(self, name: str) -> str | None:
        """Every line of the header joined with ``", "`` in order, or None."""
        return header_value(self._raw, _wanted(name))

    def __getitem__(self, name: str) -> str:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def _all(self) -> dict[str, str]:
        if self._decoded is None:
            decoded: dict[str, str] = {}
            for raw_name, raw_value in self._raw:
                decoded.setdefault(raw_name.decode("latin-1").lower(), raw_value.decode("latin-1"))
            self._decoded = decoded
        return self._decoded

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def list_value(request: RequestInfo, name: str) -> str | None:
    """Header ``name`` (lower-case) of ``request`` with every line, for a list field such as
    ``X-Forwarded-For``: joined with ``", "`` under ASGI; under WSGI the environ's value,
    which the server joined already."""
    headers = request.headers
    if isinstance(headers, ASGIHeaders):
        return headers.joined(name)
    return headers.get(name)


class _Draft:
    """``RequestInfo``'s slots without its frozen ``__setattr__``: one is made per request.

    The same trick as ``ratewarden.decision.make_decision``: set plain slots,
    then become the frozen RequestInfo it equals in every way.
    """

    __slots__ = RequestInfo.__slots__

    def __init__(
        self,
        method: str,
        path: str,
        peer: str | None,
        headers: Mapping[str, str],
        raw: Mapping[str, Any],
    ) -> None:
        self.method = method
        self.path = path
        self.peer = peer
        self.headers = headers
        self.raw = raw
        self.__class__ = RequestInfo  # type: ignore[assignment]


def route_path(scope: Mapping[str, Any]) -> str:
    """The path the app routes: ``scope["path"]`` without the ``root_path`` it starts with.

    ASGI's ``path`` includes ``root_path`` (the mount point, uvicorn's ``--root-path``);
    Starlette's routing strips it the same way (at a segment boundary; ``"/"`` for the
    mount point itself), as a WSGI ``PATH_INFO`` excludes ``SCRIPT_NAME``.
    """
    path: str = scope.get("path", "/")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        rest = path[len(root) :]
        if not rest:
            return "/"
        if rest[0] == "/":
            return rest
    return path


def from_asgi(scope: Mapping[str, Any]) -> RequestInfo:
    """Read an ASGI ``http`` scope (header bytes are decoded as Latin-1, as HTTP defines);
    ``path`` is the one the app routes (``route_path``)."""
    client = scope.get("client")
    method = scope.get("method", "GET")
    request: RequestInfo = _Draft(  # type: ignore[assignment]
        method if method.isupper() else method.upper(),
        route_path(scope),
        str(client[0]) if client else None,
        ASGIHeaders(scope.get("headers", ())),
        scope,
    )
    return request


def from_wsgi(environ: Mapping[str, Any]) -> RequestInfo:
    """Read a WSGI environ (``HTTP_*`` keys, ``CONTENT_TYPE``, ``CONTENT_LENGTH``)."""
    headers: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[key[5:].replace("_", "-").lower()] = str(value)
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = str(environ[key])
    peer = environ.get("REMOTE_ADDR") or None
    method = str(environ.get("REQUEST_METHOD", "GET")).upper()
    return RequestInfo(method, str(environ.get("PATH_INFO", "") or "/"), peer, headers, environ)


class ClientGoneError(Exception):
    """The client disconnected before its request body ended: there is nobody to answer."""


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """An ASGI request's whole body, or None once it passes ``limit`` bytes (the rest unread).

    Raises ``ClientGoneError`` when the client disconnects first.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGoneError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the real channel."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replaying() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replaying
