"""`ratewarden serve` as a real subprocess on free loopback ports (also used by tests/e2e)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests._servers import HOST, free_port

_SCRIPT = Path(sys.executable).with_name("ratewarden")
#: The installed console script when there is one, else the module (same ``main``).
RATEWARDEN = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "ratewarden.cli"]


class ServeProcess:
    """``ratewarden serve --config PATH [args]``, ports given through RATEWARDEN_* variables
    (and ``--drain 0`` unless ``args`` or ``env`` say otherwise).

    Logs (JSON lines unless ``args`` say otherwise) go to a file read by ``logs()``.
    """

    def __init__(self, config: Path | str, *args: str, env: dict[str, str] | None = None) -> None:
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="ratewarden-serve-", suffix=".log")[1])
        environ = {
            **os.environ,
            "RATEWARDEN_GRPC_PORT": str(self.grpc_port),
            "RATEWARDEN_HTTP_PORT": str(self.http_port),
            # No --drain unless the test asks for it: every stop would wait it out.
            "RATEWARDEN_DRAIN": "0",
            **(env or {}),
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [*RATEWARDEN, "serve", "--config", str(config), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environ,
            )

    @property
    def grpc_target(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    def healthcheck(self) -> int:
        """The HTTP status of /healthcheck, or 0 when nothing answers."""
        url = f"http://{HOST}:{self.http_port}/healthcheck"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Block until /healthcheck says 200, or fail with the server's log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"ratewarden serve exited {code}:\n{self.text()}")
            if self.healthcheck() == 200:
                return
            time.sleep(0.05)
        raise RuntimeError(f"ratewarden serve did not become healthy:\n{self.text()}")

    def signal(self, signum: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``signum`` and wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout)

    def stop(self) -> None:
        """Stop for good (SIGTERM, then SIGKILL if it hangs) and remove the log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log_path.unlink(missing_ok=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (other lines skipped)."""
        entries = []
        for line in self.text().splitlines():
            if line.startswith("{"):
                entries.append(json.loads(line))
        return entries


@contextmanager
def serving(
    config: Path | str, *args: str, env: dict[str, str] | None = None
) -> Iterator[ServeProcess]:
    """A ``ServeProcess`` that answers /healthcheck for the block, stopped after it."""
    server = ServeProcess(config, *args, env=env)
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()
