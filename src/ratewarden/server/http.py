"""The HTTP side of ``ratewarden serve``: ``/json``, health, rules, metrics and the dashboard.

A small HTTP/1.1 server on asyncio streams (keep-alive, ``Content-Length`` and
chunked bodies), enough for health probes, scripts and clients that cannot
speak gRPC; it is not a general web server. The endpoints follow
envoyproxy/ratelimit:

- ``POST /json``: a ``RateLimitRequest`` in protobuf's JSON mapping
  (``{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}``)
  answered by the same service as gRPC, as JSON: 200 when OK, 429 when over
  the limit, 400 for a body that is not a valid request.
- ``GET /healthcheck``: 200 ``OK`` while serving (a config is loaded and the
  store answers), 500 otherwise.
- ``GET /rlconfig``: the loaded rules as text; ``/rlconfig?format=json`` as JSON.
- ``GET /metrics``: Prometheus metrics in the text exposition format.

and ratewarden's live dashboard (docs/operations.md), read-only:

- ``GET /dashboard``: one self-contained HTML page (no external resources) that
  polls ``/dashboard.json`` and redraws.
- ``GET /dashboard.json``: loaded rules, their recent rates, top keys, degraded
  decisions and store latency.

The dashboard shows request values (the top keys), so by default
(``dashboard="loopback"``) it answers only clients on a loopback address, 403
to others; ``"any"`` opens it to every client of the HTTP port and ``"off"``
removes both routes. ``/metrics`` carries no request values and is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf import json_format

from ratewarden.errors import ConfigurationError
from ratewarden.server.dashboard.page import PAGE, PAGE_CSP

__all__ = ["HttpBackend", "HttpServer"]

log = logging.getLogger("ratewarden.server.http")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
#: A connection idle this long between requests (or this slow to send one) is closed.
IDLE_TIMEOUT_S = 30.0


class HttpBackend(Protocol):
    """What the HTTP endpoints need from the server that owns them."""

    def serving(self) -> bool: ...

    def rules_text(self) -> str: ...

    def rules_dict(self) -> dict[str, Any]: ...

    async def should_rate_limit(self, request: Any) -> Any: ...

    def metrics(self, accept: str) -> tuple[bytes, str]: ...

    def dashboard(self) -> dict[str, Any]: ...


class _BadRequestError(Exception):
    def __init__(self, status: HTTPStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    peer: str = ""


@dataclass(frozen=True, slots=True)
class _Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    allow: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


_Handler = Callable[[_Request], Awaitable[_Response]]


def _text(status: HTTPStatus, text: str | None = None) -> _Response:
    return _Response(status, ((text if text is not None else status.phrase) + "\n").encode())


#: ``dashboard=`` values: who may open the dashboard.
DASHBOARD_ACCESS = ("loopback", "any", "off")
_NO_STORE = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"))


def _is_loopback(peer: str) -> bool:
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


class HttpServer:
    """Serves ``backend`` over HTTP/1.1; ``start`` binds, ``stop`` drains in-flight requests.

    ``dashboard`` is one of ``DASHBOARD_ACCESS`` (see the module docstring).
    """

    def __init__(self, backend: HttpBackend, *, dashboard: str = "loopback") -> None:
        if dashboard not in DASHBOARD_ACCESS:
            raise ConfigurationError(
                f"dashboard {dashboard!r} must be one of {', '.join(DASHBOARD_ACCESS)}"
            )
        self._backend = backend
        self._dashboard = dashboard
        self._server: asyncio.Server | None = None
        self._busy: set[asyncio.Task[None]] = set()
        self._idle: set[asyncio.StreamWriter] = set()
        self._closing = False
        self._routes: dict[str, tuple[tuple[str, ...], _Handler]] = {
            "/json": (("POST",), self._json),
            "/healthcheck": (("GET", "HEAD"), self._healthcheck),
            "/rlconfig": (("GET", "HEAD"), self._rlconfig),
            "/metrics": (("GET", "HEAD"), self._metrics),
        }
        if dashboard != "off":
            self._routes["/dashboard"] = (("GET", "HEAD"), self._dashboard_page)
            self._routes["/dashboard.json"] = (("GET", "HEAD"), self._dashboard_json)

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen on ``host:port`` and return the port bound (useful with port 0)."""
        self._server = await asyncio.start_server(
            self._connection, host, port, reuse_port=reuse_port, limit=MAX_HEAD_BYTES
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float) -> None:
        """Stop accepting, close idle connections, give requests in flight ``grace`` seconds."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._idle):
            writer.close()
        busy = {task for task in self._busy if not task.done()}
        if busy:
            _, late = await asyncio.wait(busy, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        if self._server is not None:
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
        try:
            while not self._closing:
                self._idle.add(writer)
                try:
                    request = await asyncio.wait_for(_read_request(reader, peer), IDLE_TIMEOUT_S)
                finally:
                    self._idle.discard(writer)
                if request is None:
                    break
                self._busy.add(task)
                try:
                    response = await self._respond(request)
                    keep_alive = request.keep_alive and not self._closing
                    await _write(
                        writer, response, head_only=request.method == "HEAD", keep_alive=keep_alive
                    )
                finally:
                    self._busy.discard(task)
                if not keep_alive:
                    break
        except _BadRequestError as exc:
            with contextlib.suppress(ConnectionError):
                await _write(writer, _text(exc.status, str(exc)), head_only=False, keep_alive=False)
        except asyncio.LimitOverrunError:
            with contextlib.suppress(ConnectionError):
                await _write(
                    writer,
                    _text(HTTPStatus.BAD_REQUEST, "line too long"),
                    head_only=False,
                    keep_alive=False,
                )
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _respond(self, request: _Request) -> _Response:
        path = urlsplit(request.target).path
        route = self._routes.get(path)
        if route is None:
            return _text(HTTPStatus.NOT_FOUND)
        methods, handler = route
        if request.method not in methods:
            return _Response(
                HTTPStatus.METHOD_NOT_ALLOWED, b"Method Not Allowed\n", allow=", ".join(methods)
            )
        try:
            return await handler(request)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, path, extra={"event": "http_error"})
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR)

    async def _json(self, request: _Request) -> _Response:
        try:
            message = json_format.Parse(request.body or b"{}", rls_pb2.RateLimitRequest())
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            return _text(HTTPStatus.BAD_REQUEST, f"not a RateLimitRequest: {exc}")
        try:
            answer = await self._backend.should_rate_limit(message)
        except ConfigurationError as exc:
            return _text(HTTPStatus.BAD_REQUEST, str(exc))
        code = answer.overall_code
        if code == rls_pb2.RateLimitResponse.OVER_LIMIT:
            status = HTTPStatus.TOO_MANY_REQUESTS
        elif code == rls_pb2.RateLimitResponse.OK:
            status = HTTPStatus.OK
        else:
            status = HTTPStatus.INTERNAL_SERVER_ERROR
        body = json_format.MessageToJson(answer, indent=None).encode()
        return _Response(status, body, "application/json")

    async def _healthcheck(self, request: _Request) -> _Response:
        if self._backend.serving():
            return _text(HTTPStatus.OK, "OK")
        return _text(HTTPStatus.INTERNAL_SERVER_ERROR, "NOT SERVING")

    async def _rlconfig(self, request: _Request) -> _Response:
        query = parse_qs(urlsplit(request.target).query)
        if query.get("format") == ["json"]:
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
        headers = (*_NO_STORE, ("Content-Security-Policy", PAGE_CSP))
        return _Response(HTTPStatus.OK, PAGE, "text/html; charset=utf-8", headers=headers)

    async def _dashboard_json(self, request: _Request) -> _Response:
        refused = self._dashboard_refused(request)
        if refused is not None:
            return refused
        body = json.dumps(self._backend.dashboard(), separators=(",", ":"), allow_nan=False)
        return _Response(HTTPStatus.OK, body.encode(), "application/json", headers=_NO_STORE)


async def _read_request(reader: asyncio.StreamReader, peer: str = "") -> _Request | None:
    """One request from the stream, or None when the client closed between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise _BadRequestError(HTTPStatus.BAD_REQUEST, "incomplete request head") from None
    except asyncio.LimitOverrunError:
        raise _BadRequestError(
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head over 64 KiB"
        ) from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequestError(HTTPStatus.BAD_REQUEST, f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequestError(HTTPStatus.BAD_REQUEST, f"bad header line {line[:100]!r}")
        headers[name.lower()] = value.strip()
    body = await _read_body(reader, headers)
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return _Request(method, target, headers, body, keep_alive, peer)


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                length = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise _BadRequestError(HTTPStatus.BAD_REQUEST, "bad chunk size") from None
            size += length
            if size > MAX_BODY_BYTES:
                raise _BadRequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body over 1 MiB")
            if length == 0:
                # Trailers, if any, end with an empty line.
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(length))
            await reader.readexactly(2)
    raw = headers.get("content-length", "0")
    if not raw.isdigit():
        raise _BadRequestError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw[:40]!r}")
    length = int(raw)
    if length > MAX_BODY_BYTES:
        raise _BadRequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body over 1 MiB")
    return await reader.readexactly(length) if length else b""


async def _write(
    writer: asyncio.StreamWriter, response: _Response, *, head_only: bool, keep_alive: bool
) -> None:
    head = [
        f"HTTP/1.1 {response.status.value} {response.status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    if response.allow is not None:
        head.append(f"Allow: {response.allow}")
    head.extend(f"{name}: {value}" for name, value in response.headers)
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(response.body)
    await writer.drain()
