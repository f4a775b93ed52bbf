"""A real memcached on loopback for the memcache store's tests (Debian package ``memcached``,
installed by scripts/test)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence

from tests._servers import HOST, START_TIMEOUT_S, free_port

__all__ = ["MEMCACHED", "MemcachedServer"]

#: The memcached binary, or None when it is not on PATH (scripts/test installs it).
MEMCACHED = shutil.which("memcached")


class MemcachedServer:
    """One memcached on 127.0.0.1 with ``memory_mb`` of memory, stopped by ``stop``; ``extra``
    adds command-line options (``["-I", "2048", "-o", "slab_chunk_max=1024"]``: 2 KB items)."""

    def __init__(
        self, port: int | None = None, memory_mb: int = 64, extra: Sequence[str] = ()
    ) -> None:
        if MEMCACHED is None:
            raise RuntimeError(
                "no memcached on PATH: scripts/test installs it (apt-get install memcached)"
            )
        self.port = port or free_port()
        # -U 0: no UDP; -u root only matters when run as root, where memcached insists on it.
        self.process = subprocess.Popen(
            [
                MEMCACHED,
                "-l",
                HOST,
                "-p",
                str(self.port),
                "-U",
                "0",
                "-m",
                str(memory_mb),
                "-u",
                "root",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"memcache://{HOST}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.port

    def command(self, request: bytes) -> bytes:
        """Send one raw request and return what the server answers first (tests' own look)."""
        with socket.create_connection(self.address, timeout=2) as sock:
            sock.sendall(request)
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

    def stats(self) -> str:
        """memcached's ``stats`` (``STAT name value`` lines)."""
        with socket.create_connection(self.address, timeout=2) as sock:
            sock.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data.decode()

    def flush(self) -> None:
        assert self.command(b"flush_all\r\n") == b"OK\r\n"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                assert self.process.stderr is not None
                raise RuntimeError(f"memcached exited: {self.process.stderr.read().decode()}")
            try:
                if self.command(b"version\r\n").startswith(b"VERSION"):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"memcached on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()
