"""What `ratewarden serve` says at start about its environment: a misspelt ``RATEWARDEN_*``
variable is warned about once, with the one meant; a ``PROMETHEUS_MULTIPROC_DIR`` that is
no directory is refused naming it; the HTTP port taken reads as the gRPC port's does."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests._servers import HOST, RedisServer, free_port
from tests.server_transport._process import RATEWARDEN, ServeProcess


def serve(rules: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``ratewarden serve`` on ``rules`` to its end, on free ports."""
    argv = [*RATEWARDEN, "serve", "--config", str(rules), "--grpc-port", str(free_port())]
    return subprocess.run(
        [*argv, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


@pytest.mark.redis
def test_a_misspelt_variable_is_warned_about_once_with_the_one_meant(
    rules: Path, redis_server: RedisServer
) -> None:
    """``RATEWARDEN_WORKER=3`` beside two real workers: one ``unknown_variables`` line (the
    parent's, not one per worker) naming it and RATEWARDEN_WORKERS; RATEWARDEN_PURE, read
    by the storage, is not in it."""
    environ = {"RATEWARDEN_WORKER": "3", "RATEWARDEN_PURE": "1"}
    server = ServeProcess(rules, "--workers", "2", "--store", redis_server.url, env=environ)
    try:
        server.wait_serving()
        [line] = [e for e in server.logs() if e.get("event") == "unknown_variables"]
        assert line["level"] == "warning" and "worker" not in line
        assert line["variables"]["RATEWARDEN_WORKER"] == "RATEWARDEN_WORKERS"
        assert "RATEWARDEN_PURE" not in line["variables"]
        assert "RATEWARDEN_WORKER (did you mean RATEWARDEN_WORKERS?)" in line["msg"]
    finally:
        server.stop()


def test_a_metrics_directory_that_does_not_exist_is_refused_naming_it(
    rules: Path, tmp_path: Path
) -> None:
    """PROMETHEUS_MULTIPROC_DIR left over in an image, naming nothing: exit 2, one line with
    the variable and its value, before anything listens."""
    gone = tmp_path / "nodir"
    done = serve(
        rules, "--http-port", str(free_port()), env={"PROMETHEUS_MULTIPROC_DIR": str(gone)}
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"ratewarden serve: error: PROMETHEUS_MULTIPROC_DIR '{gone}': does not exist; "
        "prometheus_client keeps the metrics in files there while it is set: make it a "
        "directory this user can write, or unset it (--workers makes one of its own)"
    ]


def test_a_busy_http_port_reads_as_a_busy_grpc_port(rules: Path) -> None:
    """The HTTP port taken: ratewarden's own reason, the OS's words in brackets, the flag
    that moves it; not uvicorn's ``while attempting to bind`` text."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(rules, "--host", HOST, "--http-port", str(port), env={})
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"ratewarden serve: cannot listen for HTTP on {HOST}:{port}: the port is in use by "
        "another process (Address already in use); give another port with --http-port"
    ]
