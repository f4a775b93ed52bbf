"""A stand-in LLM upstream for the Envoy budget tests (in-process and through ratewarden serve)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests._servers import HOST


class TokenModel(BaseHTTPRequestHandler):
    """Answers 200 and reports ``?tokens=N`` as its usage in ``x-tokens-used``; counts its calls."""

    calls = 0

    def do_GET(self) -> None:
        type(self).calls += 1
        tokens = parse_qs(urlparse(self.path).query).get("tokens", ["0"])[0]
        body = b"generated\n"
        self.send_response(200)
        self.send_header("x-tokens-used", tokens)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def token_model() -> Iterator[int]:
    """``TokenModel`` served on loopback for the block: its port."""
    model = ThreadingHTTPServer((HOST, 0), TokenModel)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    try:
        yield int(model.server_address[1])
    finally:
        model.shutdown()
        model.server_close()
