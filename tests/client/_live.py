"""Real servers on 127.0.0.1 for the client and idempotency tests.

``LiveASGI`` runs an ASGI app under uvicorn in a thread; ``LiveWSGI`` runs a WSGI
app under werkzeug's threaded server. Both pick a free loopback port, wait (bounded)
until the server accepts connections, and stop when asked.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn
from werkzeug.serving import make_server

HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class LiveASGI:
    """An ASGI app served by uvicorn on loopback, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app, host=HOST, port=self.port, log_level="warning", lifespan="off", backlog=256
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {HOST}:{self.port}")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(START_TIMEOUT_S)


class LiveWSGI:
    """A WSGI app served by werkzeug's threaded server on loopback."""

    def __init__(self, app: Any) -> None:
        self.server = make_server(HOST, 0, app, threaded=True)
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(START_TIMEOUT_S)
