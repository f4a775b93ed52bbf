"""What a middleware does with a request, whatever the server: pass it on, or answer it here.

An ``Outcome`` is the sans-I/O answer every middleware computes; the ASGI and
WSGI drivers only send it. Refusals carry a problem document (RFC 9457) and the
headers that go with it, built by ``refusal``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from ratewarden.headers import Header

__all__ = [
    "PASS",
    "Outcome",
    "Passed",
    "close_wsgi",
    "encoded",
    "refusal",
    "send_asgi",
    "send_wsgi",
]

_TITLES = {
    409: "Conflict",
    413: "Content Too Large",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to do with the request: pass it on with ``headers``, or answer ``status``
    (429 unless said otherwise) with ``headers`` and ``body``."""

    blocked: bool
    headers: tuple[Header, ...] = ()
    body: bytes = b""
    status: int = 429


#: An allowed request without headers: the app runs untouched.
PASS = Outcome(False)


class Passed:
    """An allowed ``Outcome`` built without the frozen ``__setattr__`` (one per request)."""

    __slots__ = Outcome.__slots__

    def __init__(self, headers: tuple[Header, ...]) -> None:
        self.blocked = False
        self.headers = headers
        self.body = b""
        self.status = 429
        self.__class__ = Outcome  # type: ignore[assignment]


def refusal(
    status: int,
    detail: str,
    *,
    retry_after: int | None = None,
    extra: dict[str, Any] | None = None,
    headers: tuple[Header, ...] = (),
) -> Outcome:
    """A request answered here with ``status`` and a problem document (RFC 9457): its
    headers are ``headers``, then ``Retry-After`` (unless None), ``Cache-Control: no-store``
    and the document's type and length."""
    document: dict[str, Any] = {
        "type": "about:blank",
        "title": _TITLES[status],
        "status": status,
        "detail": detail,
        **(extra or {}),
    }
    body = json.dumps(document, separators=(",", ":")).encode()
    found = [*headers]
    if retry_after is not None:
        found.append(("Retry-After", str(retry_after)))
    found += [
        ("Cache-Control", "no-store"),
        ("Content-Type", "application/problem+json"),
        ("Content-Length", str(len(body))),
    ]
    return Outcome(True, tuple(found), body, status)


def _reason(status: int) -> str:
    """The reason phrase of a WSGI status line: the registered one, else the code's class
    (a rule's own answer may use any 4xx or 5xx code)."""
    title = _TITLES.get(status)
    if title is not None:
        return title
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Error" if status < 500 else "Server Error"


@functools.lru_cache(maxsize=64)
def _name(name: str) -> bytes:
    return name.lower().encode("latin-1")


def encoded(headers: Iterable[Header]) -> list[tuple[bytes, bytes]]:
    """Headers as ASGI wants them: lower-case names, latin-1 bytes."""
    return [(_name(name), value.encode("latin-1")) for name, value in headers]


async def send_asgi(
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]], outcome: Outcome, *, head: bool
) -> None:
    """Answer a blocked ``outcome`` on ASGI; a HEAD gets the headers and no body."""
    await send(
        {
            "type": "http.response.start",
            "status": outcome.status,
            "headers": encoded(outcome.headers),
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else outcome.body})


def send_wsgi(start_response: Callable[..., Any], outcome: Outcome, *, head: bool) -> list[bytes]:
    """Answer a blocked ``outcome`` on WSGI; a HEAD gets the headers (Content-Length
    included) and no body."""
    start_response(f"{outcome.status} {_reason(outcome.status)}", list(outcome.headers))
    return [b""] if head else [outcome.body]


def close_wsgi(result: Iterable[bytes]) -> None:
    """Close an app's WSGI response iterable (``close()`` when it has one), as WSGI asks of
    whoever wraps it."""
    close = getattr(result, "close", None)
    if close is not None:
        close()
