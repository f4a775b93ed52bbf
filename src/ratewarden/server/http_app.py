"""The HTTP endpoints of ``ratewarden serve`` as an ASGI app: routing and answers, no sockets.

``HttpApp`` answers one request at a time from its backend (``RateLimitServer``);
``server/http.py`` serves it. The endpoints follow envoyproxy/ratelimit:

- ``POST /json``: a ``RateLimitRequest`` in protobuf's JSON mapping
  (``{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}``)
  answered by the same service as gRPC, as JSON: 200 when OK, 429 when over
  the limit, 400 for a body that is not a valid request (valid JSON that is not an
  object, such as ``null`` or ``[]``, is named as such; an empty body and JSON nested
  too deeply for Python's parser say so), 415 for a ``Content-Encoding`` other than
  ``identity``, 503 before the first rules (``--xds-force-start``), 413 for a body over
  1 MiB (refused from its ``Content-Length``, or as soon as a chunked body passes
  the limit: no more than 1 MiB of it is ever held).
- ``GET /healthcheck``: 200 ``OK`` while serving (a config is loaded and the
  store answers), 500 otherwise.
- ``GET /rlconfig``: the loaded rules as text; ``/rlconfig?format=json`` as JSON
  (``format`` in any case; another value, or two, is 400 naming the accepted ones).
- ``GET /metrics``: Prometheus metrics, in the format the ``Accept`` header asks for.
- ``GET /``: the port's endpoints, one ``path: what it serves`` line each, in path
  order, as envoyproxy/ratelimit's debug port lists its own (``/rlqs.json`` only while
  RLQS is on).

and ratewarden's live dashboard (docs/operations.md), read-only:

- ``GET /dashboard``: one self-contained HTML page (no external resources) that
  polls ``/dashboard.json`` and redraws.
- ``GET /dashboard.json``: loaded rules, their recent rates, top keys, degraded
  decisions and store latency.
- ``GET /rlqs.json``: with ``--rlqs``, the quota service's streams, counts and every
  stream's assignment per bucket (docs/rlqs.md); 404 when RLQS is off.

Every ``GET`` route answers ``HEAD`` too; another path is 404, another method 405
with ``Allow``. The dashboard shows request values (the top keys), so by default
(``dashboard="loopback"``) it answers only clients on a loopback address (the
scope's ``client``, the TCP peer), 403 to others; ``"any"`` opens it to every
client of the HTTP port and ``"off"`` removes both routes. ``/rlqs.json`` shows
bucket ids, request values too, so it follows the same setting. ``/metrics`` carries
no request values and is open.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs

from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf import json_format

from ratewarden.errors import ConfigurationError, ServiceUnavailableError
from ratewarden.server.dashboard.page import PAGE, PAGE_CSP, interval_refused

__all__ = ["DASHBOARD_ACCESS", "MAX_BODY_BYTES", "HttpApp", "HttpBackend"]

log = logging.getLogger("ratewarden.server.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY_BYTES = 1024 * 1024
#: ``dashboard=`` values: who may open the dashboard.
DASHBOARD_ACCESS = ("loopback", "any", "off")
#: ``/rlconfig?format=`` values, matched in any case; ``text`` without the parameter.
RLCONFIG_FORMATS = ("text", "json")
#: What each endpoint serves, for the index at ``/``.
_ENDPOINTS = {
    "/json": "POST a RateLimitRequest as JSON: answered as over gRPC (200 OK, 429 over the "
    "limit; other methods 405)",
    "/healthcheck": "200 OK while serving, 500 otherwise",
    "/rlconfig": "the loaded rules, one line each (?format=json: the normalised config)",
    "/metrics": "Prometheus metrics",
    "/dashboard": "the live dashboard (HTML)",
    "/dashboard.json": "the dashboard's data: rules, rates, top keys, degraded decisions",
    "/rlqs.json": "with --rlqs, the quota service's streams and assignments",
}
_TEXT = "text/plain; charset=utf-8"
_NO_STORE = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"))


class HttpBackend(Protocol):
    """What the HTTP endpoints need from the server that owns them."""

    def serving(self) -> bool: ...

    def rules_text(self) -> str: ...

    def rules_dict(self) -> dict[str, Any]: ...

    async def should_rate_limit(self, request: Any) -> Any: ...

    def metrics(self, accept: str) -> tuple[bytes, str]: ...

    def dashboard(self) -> dict[str, Any]: ...

    def rlqs(self) -> dict[str, Any] | None: ...

    def rlqs_streams(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    query: str
    headers: dict[str, str]
    body: bytes
    peer: str


@dataclass(frozen=True, slots=True)
class _Response:
    status: HTTPStatus
    body: bytes
    content_type: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()


_Handler = Callable[[_Request], Awaitable[_Response]]


class _ClientGoneError(Exception):
    """The client disconnected before its request body arrived: nobody to answer."""


def _text(status: HTTPStatus, text: str | None = None) -> _Response:
    return _Response(status, ((text if text is not None else status.phrase) + "\n").encode())


def _is_loopback(peer: str) -> bool:
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


_JSON_KINDS = ((type(None), "null"), (bool, "true or false"), (str, "a string"), (list, "an array"))
_SHAPE = '{"domain": ..., "descriptors": [...]}'
_EMPTY = (
    f"not a RateLimitRequest: the body is empty; POST one as a JSON object ({_SHAPE}), "
    "with Content-Length or chunked"
)
# Python's JSON parser recurses per level and gives up near 1000; a RateLimitRequest nests 5.
_TOO_DEEP = (
    "not a RateLimitRequest: the JSON is nested too deeply (a RateLimitRequest nests 5 levels)"
)


def _not_an_object(body: bytes) -> str | None:
    """Why a non-empty /json body that does not start with ``{`` is refused: valid JSON but no
    object (``null``, a number...), or nested too deeply to parse; None for text that is no JSON
    at all (json_format's message says where)."""
    if body.lstrip()[:1] == b"{":
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        return _TOO_DEEP
    except ValueError:  # not JSON (or not UTF-8): json_format's message says where
        return None
    kind = next((kind for cls, kind in _JSON_KINDS if isinstance(value, cls)), "a number")
    return f"not a RateLimitRequest: the body must be a JSON object ({_SHAPE}), not {kind}"


def _parse_request(body: bytes) -> Any:
    """The RateLimitRequest in a /json body, or a ``str``: why there is none (a 400)."""
    if not body:
        return _EMPTY
    refused = _not_an_object(body)
    if refused is not None:
        return refused
    try:
        return json_format.Parse(body, rls_pb2.RateLimitRequest())
    except json_format.ParseError as exc:
        if isinstance(exc.__cause__, RecursionError):  # deep inside the object
            return _TOO_DEEP
        return f"not a RateLimitRequest: {exc}"
    except UnicodeDecodeError as exc:
        return f"not a RateLimitRequest: {exc}"


def _unsupported_encoding(headers: dict[str, str]) -> _Response | None:
    """415 for a body with a ``Content-Encoding`` other than ``identity``: it is read as is."""
    given = [c.strip() for c in headers.get("content-encoding", "").split(",") if c.strip()]
    codings = [c for c in given if c.lower() != "identity"]
    if not codings:
        return None
    return _Response(
        HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
        f"Content-Encoding {', '.join(codings)} is not supported; send the body uncompressed "
        "(no Content-Encoding, or identity)\n".encode(),
        headers=(("Accept-Encoding", "identity"),),
    )


async def _read_body(receive: Receive, declared: str | None) -> bytes | None:
    """The request body, or None as soon as it is known to be over ``MAX_BODY_BYTES``."""
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGoneError
        chunk = message.get("body", b"")
        if len(body) + len(chunk) > MAX_BODY_BYTES:
            return None
        body += chunk
        if not message.get("more_body", False):
            return bytes(body)


class HttpApp:
    """The ASGI app of the HTTP port; ``dashboard`` is one of ``DASHBOARD_ACCESS``.

    ``metrics_path``: serve the metrics there and nothing else (``--metrics-port``).
    """

    def __init__(
        self, backend: HttpBackend, *, dashboard: str = "loopback", metrics_path: str | None = None
    ) -> None:
        if dashboard not in DASHBOARD_ACCESS:
            raise ConfigurationError(
                f"dashboard {dashboard!r} must be one of {', '.join(DASHBOARD_ACCESS)}"
            )
        self._backend = backend
        self._dashboard = dashboard
        self._routes: dict[str, tuple[tuple[str, ...], _Handler]]
        if metrics_path is not None:
            self._routes = {metrics_path: (("GET", "HEAD"), self._metrics)}
            return
        self._routes = {
            "/json": (("POST",), self._json),
            "/healthcheck": (("GET", "HEAD"), self._healthcheck),
            "/rlconfig": (("GET", "HEAD"), self._rlconfig),
            "/metrics": (("GET", "HEAD"), self._metrics),
        }
        if dashboard != "off":
            self._routes["/dashboard"] = (("GET", "HEAD"), self._dashboard_page)
            self._routes["/dashboard.json"] = (("GET", "HEAD"), self._dashboard_json)
            self._routes["/rlqs.json"] = (("GET", "HEAD"), self._rlqs_json)
        self._routes["/"] = (("GET", "HEAD"), self._index)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # The server runs with lifespan and websockets off; ASGI says to refuse the rest.
            raise ValueError(f"the HTTP port serves http scopes only, not {scope['type']!r}")
        try:
            response = await self._respond(scope, receive)
        except _ClientGoneError:
            return
        headers = [
            (b"content-type", response.content_type.encode("latin-1")),
            (b"content-length", str(len(response.body)).encode("latin-1")),
            *(
                (name.lower().encode("latin-1"), value.encode("latin-1"))
                for name, value in response.headers
            ),
        ]
        await send(
            {"type": "http.response.start", "status": int(response.status), "headers": headers}
        )
        await send({"type": "http.response.body", "body": response.body})

    async def _respond(self, scope: Scope, receive: Receive) -> _Response:
        path: str = scope["path"]
        method: str = scope["method"]
        route = self._routes.get(path)
        if route is None:
            return _text(HTTPStatus.NOT_FOUND)
        methods, handler = route
        if method not in methods:
            allow = (("Allow", ", ".join(methods)),)
            return _Response(HTTPStatus.METHOD_NOT_ALLOWED, b"Method Not Allowed\n", headers=allow)
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:  # a repeated field is one list (RFC 9110)
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        body = b""
        if method == "POST":
            read = await _read_body(receive, headers.get("content-length"))
            if read is None:
                # Closing stops the rest of the body from being read at all.
                return _Response(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    b"request body over 1 MiB\n",
                    headers=(("Connection", "close"),),
                )
            body = read
        client = scope.get("client")
        peer = str(client[0]) if client else ""
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            return await handler(_Request(method, query, headers, body, peer))
        except Exception:
            log.exception("HTTP %s %s failed", method, path, extra={"event": "http_error"})
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR)

    async def _json(self, request: _Request) -> _Response:
        unsupported = _unsupported_encoding(request.headers)
        if unsupported is not None:
            return unsupported
        message = _parse_request(request.body)
        if isinstance(message, str):
            return _text(HTTPStatus.BAD_REQUEST, message)
        try:
            answer = await self._backend.should_rate_limit(message)
        except ConfigurationError as exc:
            return _text(HTTPStatus.BAD_REQUEST, str(exc))
        except ServiceUnavailableError as exc:
            return _text(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))
        code = answer.overall_code
        if code == rls_pb2.RateLimitResponse.OVER_LIMIT:
            status = HTTPStatus.TOO_MANY_REQUESTS
        elif code == rls_pb2.RateLimitResponse.OK:
            status = HTTPStatus.OK
        else:
            status = HTTPStatus.INTERNAL_SERVER_ERROR
        body = json_format.MessageToJson(answer, indent=None).encode()
        return _Response(status, body, "application/json")

    async def _index(self, request: _Request) -> _Response:
        hidden = {"/"} if self._backend.rlqs_streams() is not None else {"/", "/rlqs.json"}
        lines = [
            f"{path}: {_ENDPOINTS[path]}" for path in sorted(self._routes) if path not in hidden
        ]
        return _text(HTTPStatus.OK, "\n".join(lines))

    async def _healthcheck(self, request: _Request) -> _Response:
        streams = self._backend.rlqs_streams()
        extra = "" if streams is None else f"\nrlqs_streams {streams}"
        if self._backend.serving():
            return _text(HTTPStatus.OK, "OK" + extra)
        return _text(HTTPStatus.INTERNAL_SERVER_ERROR, "NOT SERVING" + extra)

    async def _rlconfig(self, request: _Request) -> _Response:
        asked = parse_qs(request.query, keep_blank_values=True).get("format", ["text"])
        form = asked[0].lower()
        if len(asked) > 1 or form not in RLCONFIG_FORMATS:
            return _text(
                HTTPStatus.BAD_REQUEST,
                f"format must be one of {', '.join(RLCONFIG_FORMATS)} (any case), given once; "
                f"got {', '.join(repr(value) for value in asked)}",
            )
        if form == "json":
            body = json.dumps(self._backend.rules_dict(), indent=2, sort_keys=True) + "\n"
            return _Response(HTTPStatus.OK, body.encode(), "application/json")
        return _Response(HTTPStatus.OK, self._backend.rules_text().encode())

    async def _metrics(self, request: _Request) -> _Response:
        body, content_type = self._backend.metrics(request.headers.get("accept", ""))
        return _Response(HTTPStatus.OK, body, content_type)

    def _dashboard_refused(self, request: _Request) -> _Response | None:
        if self._dashboard == "loopback" and not _is_loopback(request.peer):
            return _text(
                HTTPStatus.FORBIDDEN,
                "the dashboard answers loopback clients only; "
                "start the server with --dashboard any to open it to others",
            )
        return None

    async def _dashboard_page(self, request: _Request) -> _Response:
        refused = self._dashboard_refused(request)
        if refused is not None:
            return refused
        bad_interval = interval_refused(request.query)
        if bad_interval is not None:
            return _text(HTTPStatus.BAD_REQUEST, bad_interval)
        headers = (*_NO_STORE, ("Content-Security-Policy", PAGE_CSP))
        return _Response(HTTPStatus.OK, PAGE, "text/html; charset=utf-8", headers=headers)

    async def _dashboard_json(self, request: _Request) -> _Response:
        refused = self._dashboard_refused(request)
        if refused is not None:
            return refused
        body = json.dumps(self._backend.dashboard(), separators=(",", ":"), allow_nan=False)
        return _Response(HTTPStatus.OK, body.encode(), "application/json", headers=_NO_STORE)

    async def _rlqs_json(self, request: _Request) -> _Response:
        refused = self._dashboard_refused(request)
        if refused is not None:
            return refused
        state = self._backend.rlqs()
        if state is None:
            return _text(HTTPStatus.NOT_FOUND, "RLQS is off; start the server with --rlqs")
        body = json.dumps(state, separators=(",", ":"), sort_keys=True)
        return _Response(HTTPStatus.OK, body.encode(), "application/json", headers=_NO_STORE)
