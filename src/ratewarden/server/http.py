"""The HTTP side of ``ratewarden serve``: the endpoints of ``http_app`` served by uvicorn.

``HttpServer`` binds the port itself (with ``SO_REUSEPORT`` for ``--workers``;
IPv6 addresses too) and runs uvicorn's server over that socket on the running
event loop, asyncio's or uvloop's. What it asks of uvicorn:

- HTTP/1.1 through h11: keep-alive, ``Content-Length`` and chunked bodies. A
  request that is not HTTP, or whose head is still unfinished after 64 KiB, is
  answered 400 and its connection closed. A keep-alive connection idle 30 s
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

import uvicorn

from ratewarden.server.http_app import HttpApp, HttpBackend

__all__ = ["HttpBackend", "HttpServer"]

MAX_HEAD_BYTES = 64 * 1024
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
            http="h11",  # even when httptools is installed: the head limit below is h11's
            ws="none",
            lifespan="off",
            log_config=None,  # ratewarden's logging stays as configure_logging set it
            log_level="error",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            timeout_keep_alive=IDLE_TIMEOUT_S,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
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
