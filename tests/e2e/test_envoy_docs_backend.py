"""docs/envoy.md's backend one-liner, run as written behind the page's Envoy and ratewarden.

The page tells a reader to put "a backend on 8000" behind Envoy; its one-liner must answer
200 to any path, /checkout included (``python3 -m http.server`` answers 404 there). Only the
ports change: the one-liner's 8000 and the bootstrap's, as in test_envoy_docs.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._servers import HOST, free_port
from tests.e2e._envoy import request, start_envoy
from tests.server_transport._process import ServeProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "envoy.md"
DOC_PORTS = {"listener": 10000, "backend": 8000, "ratewarden": 8081, "admin": 9901}


def doc_block(info: str) -> str:
    """The one fenced block of docs/envoy.md whose info string is ``info``."""
    blocks = re.findall(rf"^```{re.escape(info)}\n(.*?)^```", DOC.read_text(), re.M | re.S)
    assert len(blocks) == 1, f"docs/envoy.md should have exactly one ```{info} block"
    return str(blocks[0])


@pytest.fixture
def backend() -> Iterator[int]:
    """The page's one-liner on a free port (its 8000 replaced), answering; stopped after."""
    command = doc_block("bash backend").strip()
    assert command.count("8000") == 1
    port = free_port()
    process = subprocess.Popen(
        ["bash", "-c", command.replace("8000", str(port))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError as exc:
                if process.poll() is not None:
                    assert process.stderr is not None
                    raise AssertionError(f"the backend exited: {process.stderr.read()!r}") from exc
                if time.monotonic() > deadline:
                    raise AssertionError("the backend did not answer within 10 s") from exc
                time.sleep(0.05)
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: bash and the server
        process.wait(10)


def test_the_pages_backend_answers_every_path_through_its_envoy(
    backend: int, tmp_path: Path
) -> None:
    """/checkout and / with an API key: 200 "ok" from the one-liner, through Envoy and ratewarden
    (the global tier's headers show ratewarden was asked)."""
    assert request(backend, "/checkout")[0] == 200  # directly
    rules = tmp_path / "ratewarden.yaml"
    rules.write_text(doc_block("yaml ratewarden.yaml"))
    bootstrap = doc_block("yaml envoy.yaml")
    ratewarden = ServeProcess(rules)
    envoy = None
    try:
        ratewarden.wait_serving()

        def fill(listener: int, admin: int) -> str:
            actual = {
                "listener": listener,
                "backend": backend,
                "ratewarden": ratewarden.grpc_port,
                "admin": admin,
            }
            filled = bootstrap
            for name, port in DOC_PORTS.items():
                filled = filled.replace(f"port_value: {port}}}", f"port_value: {actual[name]}}}")
            return filled

        envoy = start_envoy(fill)
        for path in ("/checkout", "/"):
            status, headers, body = request(envoy.port, path, headers={"x-api-key": "doc-backend"})
            assert (status, body) == (200, b"ok\n"), path
            assert "x-ratelimit-limit" in headers
    finally:
        if envoy is not None:
            envoy.stop()
        ratewarden.stop()
