"""The HTTP side of ``ratewarden serve``: the endpoints of ``http_app`` served by uvicorn.

``HttpServer`` binds the port itself (with ``SO_REUSEPORT`` for ``--workers``;
IPv6 addresses too) and runs uvicorn's server over that socket on the running
event loop, asyncio's or uvloop's. What it asks of uvicorn:

- HTTP/1.1 through h11: keep-alive, ``Content-Length`` and chunked bodies. A
  request that is not HTTP is answered 400 and its connection closed. A head
  over ``MAX_HEAD_BYTES`` is answered 431 and its connection closed, however its
  bytes arrive: h11's own limit (``max_incomplete_event_size``) refuses only a
  buffer still without a whole head, so one that ends in the same read, up to
  twice the limit, got through; ``_HeadLimitedProtocol`` measures every head h11
  parses as well. A keep-alive connection idle 30 s
  between requests is closed; uvicorn sets no deadline for a request to arrive
  (nor for a new connection to send its first byte).
- No signal handlers: ``ratewarden serve`` handles SIGTERM and SIGINT itself and
  calls ``stop``.
- No access log, and uvicorn's own logger (``uvicorn.error``) at ERROR: its
  start and stop lines and a warning per malformed request would only repeat
  ratewarden's log lines or let any client write to them. ``configure_logging``
  writes its errors as ratewarden's lines (``server/logs.py``).
- The peer is the TCP peer (no ``X-Forwarded-For``): the dashboard's loopback
  check depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ratewarden.server.http_app import HttpApp, HttpBackend

__all__ = ["HttpBackend", "HttpServer"]

#: The largest request head served: request line and header lines, each with its CRLF, and
#: the blank line (a header counted as ``Name: value``, the whitespace around a value aside).
MAX_HEAD_BYTES = 64 * 1024
HEAD_TOO_LARGE = 431
_HEAD_TOO_LARGE_REASON = HTTPStatus(HEAD_TOO_LARGE).phrase.encode("ascii")
#: A keep-alive connection idle this long between two requests is closed.
IDLE_TIMEOUT_S = 30


class _EmbeddedServer(uvicorn.Server):
    """uvicorn's server, minus its signal handling, saying when it accepts connections."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn would replace the process's SIGTERM/SIGINT handlers for the whole run (and
        # raise the signal again on its way out); ratewarden serve's own handlers call stop().
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()


def _head_size(event: h11.Request) -> int:
    """The bytes of ``event``'s head as h11 read it (see ``MAX_HEAD_BYTES``)."""
    line = len(event.method) + len(event.target) + len(event.http_version) + len(b"  HTTP/\r\n")
    fields = sum(len(name) + len(value) + 4 for name, value in event.headers.raw_items())
    return line + fields + 2


class _HeadLimitedConnection(h11.Connection):
    """h11's connection, refusing a parsed head over ``MAX_HEAD_BYTES`` as its own limit does,
    and keeping the status its last refusal suggests."""

    refused_status = 400

    def next_event(self) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        in_head = self.their_state is h11.IDLE  # not a chunk's size line or trailers
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refused_status = exc.error_status_hint if in_head else 400
            raise
        if isinstance(event, h11.Request) and _head_size(event) > MAX_HEAD_BYTES:
            self.refused_status = HEAD_TOO_LARGE
            raise h11.RemoteProtocolError("request head too large", HEAD_TOO_LARGE)
        return event


class _HeadLimitedProtocol(H11Protocol):
    """uvicorn's h11 protocol over ``_HeadLimitedConnection``: a head over the limit, whole
    or not, is 431 with a message and the connection closed; other refusals stay 400."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _HeadLimitedConnection(h11.SERVER, MAX_HEAD_BYTES)

    def send_400_response(self, msg: str) -> None:
        conn = self.conn
        if not isinstance(conn, _HeadLimitedConnection) or conn.refused_status != HEAD_TOO_LARGE:
            super().send_400_response(msg)
            return
        text = f"request head over {MAX_HEAD_BYTES // 1024} KiB (request line and headers)\n"
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(text)).encode("ascii")),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(
                status_code=HEAD_TOO_LARGE, headers=headers, reason=_HEAD_TOO_LARGE_REASON
            ),
            h11.Data(data=text.encode("ascii")),
            h11.EndOfMessage(),
        ):
            self.transport.write(conn.send(event) or b"")
        self.transport.close()


def _listen(host: str, port: int, *, reuse_port: bool) -> list[socket.socket]:
    """A listening socket on each address ``host`` resolves to, all on the same port."""
    found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, _, _, _, address in dict.fromkeys(found):
            bound = sockets[0].getsockname()[1] if sockets else port  # port 0: the kernel's pick
            at = (address[0], bound, *address[2:])
            sockets.append(socket.create_server(at, family=family, reuse_port=reuse_port))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class HttpServer:
    """Serves ``backend`` over HTTP; ``start`` binds, ``stop`` drains in-flight requests.

    ``dashboard`` is one of ``http_app.DASHBOARD_ACCESS`` (who may open the dashboard);
    ``metrics_path``: the metrics there, and nothing else.
    """

    def __init__(
        self, backend: HttpBackend, *, dashboard: str = "loopback", metrics_path: str | None = None
    ) -> None:
        self.app = HttpApp(backend, dashboard=dashboard, metrics_path=metrics_path)
        self._server: _EmbeddedServer | None = None
        self._serving: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen on ``host:port`` and return the port bound (useful with port 0).

        OSError when the address cannot be bound (a busy port, an unknown host).
        """
        sockets = _listen(host, port, reuse_port=reuse_port)
        config = uvicorn.Config(
            self.app,
            http=_HeadLimitedProtocol,  # h11, even when httptools is installed: the head limit
            ws="none",
            lifespan="off",
            log_config=None,  # ratewarden's logging stays as configure_logging set it
            log_level="error",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            timeout_keep_alive=IDLE_TIMEOUT_S,
        )
        server = _EmbeddedServer(config)
        serving = asyncio.create_task(server.serve(sockets=sockets))
        listening = asyncio.create_task(server.listening.wait())
        await asyncio.wait((serving, listening), return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            for sock in sockets:
                sock.close()
            serving.result()  # raises what stopped it
            raise RuntimeError("the HTTP server stopped before it listened")
        self._server, self._serving = server, serving
        return int(sockets[0].getsockname()[1])

    async def stop(self, grace: float) -> None:
        """Stop accepting, close idle connections, give requests in flight ``grace`` seconds.

        Requests still running then are cancelled (their clients get a 500). uvicorn
        notices the stop within 0.1 s and waits 0.1 s more before it drains.
        """
        server, serving = self._server, self._serving
        if server is None or serving is None:
            return
        self._server = self._serving = None
        # uvicorn hands the grace to asyncio.timeout, which takes any number of seconds.
        server.config.timeout_graceful_shutdown = grace  # type: ignore[assignment]
        server.should_exit = True
        await serving
