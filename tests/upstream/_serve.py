"""``ratewarden serve`` as a process on envoyproxy/ratelimit's variables alone.

``upstream_serve(environ, http_port)`` starts it with ``environ`` over the test
process's own environment minus every ``RATEWARDEN_*`` variable, waits until its
HTTP port answers ``/healthcheck``, and on the way out stops it with SIGINT (which, unlike
SIGTERM, skips the ``--drain`` a deployment's stop waits out: no flag or ``RATEWARDEN_*``
variable may set it here) and demands a clean exit (its log shown otherwise).
``serve_rules`` does so on one rules file in upstream's runtime directory, on free loopback
ports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests._servers import HOST, free_port
from tests.server_transport._process import RATEWARDEN

START_TIMEOUT_S = 30.0


def get(port: int, path: str) -> tuple[int, str]:
    """``(status, body)`` of one GET on loopback; ``(0, "")`` when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=2) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def without_ratewarden(environ: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without a ``RATEWARDEN_*`` variable, then ``environ``."""
    out = {key: value for key, value in os.environ.items() if not key.startswith("RATEWARDEN_")}
    out.update(environ)
    assert not [key for key in out if key.startswith("RATEWARDEN_")]
    return out


@contextmanager
def upstream_serve(environ: Mapping[str, str], http_port: int) -> Iterator[Path]:
    """``ratewarden serve`` on ``environ`` until the block ends; yields its log file."""
    log_path = Path(tempfile.mkstemp(prefix="ratewarden-upstream-", suffix=".log")[1])
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*RATEWARDEN, "serve"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=without_ratewarden(environ),
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while get(http_port, "/healthcheck")[0] != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"serve did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield log_path
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(20) == 0, log_path.read_text()
        finally:
            if process.poll() is None:
                process.kill()
            log_path.unlink(missing_ok=True)


@contextmanager
def serve_rules(tmp_path: Path, rules: str, **environ: str) -> Iterator[tuple[int, int]]:
    """``upstream_serve`` with ``rules`` as ``RUNTIME_ROOT/config/d.yaml`` (upstream's runtime
    directory under ``tmp_path``), ``PORT`` and ``GRPC_PORT`` free, and ``environ``; yields
    ``(http_port, grpc_port)``."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "d.yaml").write_text(rules)
    http, grpc_port = free_port(), free_port()
    ports = {"RUNTIME_ROOT": str(tmp_path), "PORT": str(http), "GRPC_PORT": str(grpc_port)}
    with upstream_serve({**ports, **environ}, http):
        yield http, grpc_port
