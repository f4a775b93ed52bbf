"""A real memcached on loopback or on a Unix socket for the memcache store's tests (Debian
package ``memcached``, installed by scripts/test)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tests._servers import HOST, START_TIMEOUT_S, free_port

__all__ = ["MEMCACHED", "MemcachedServer", "TlsFiles", "short_dir", "tls_files"]

#: The memcached binary, or None when it is not on PATH (scripts/test installs it).
MEMCACHED = shutil.which("memcached")


@dataclass(frozen=True)
class TlsFiles:
    """A test CA, a server certificate and key signed by it for ``names``, and a client
    certificate and key signed by it (for mutual TLS)."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def tls_files(directory: Path, names: Sequence[str] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """Make a CA and certificates with trustme (a test dependency) in ``directory``."""
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert(*names)
    client = ca.issue_cert("client@ratewarden.test")
    files = TlsFiles(
        directory / "ca.pem",
        directory / "server.crt",
        directory / "server.key",
        directory / "client.crt",
        directory / "client.key",
    )
    ca.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.cert))
    server.private_key_pem.write_to_path(str(files.key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    return files


@contextmanager
def short_dir() -> Iterator[Path]:
    """A new private directory (mode 0700) under /tmp, removed afterwards: a Unix socket's
    path holds 107 bytes at most, more than pytest's ``tmp_path`` may leave."""
    directory = Path(tempfile.mkdtemp(prefix="rw", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class MemcachedServer:
    """One memcached on 127.0.0.1 with ``memory_mb`` of memory, stopped by ``stop``; ``extra``
    adds command-line options (``["-I", "2048", "-o", "slab_chunk_max=1024"]``: 2 KB items).

    With ``tls``, ``port`` speaks TLS only (with ``client_certs``, a client must show a
    certificate of the test CA), and a second port, ``plain_port``, speaks without, for the
    tests' own looks (``command``, ``stats``). With ``unix_socket`` (a path), it listens on
    that Unix socket only (memcached's ``-s``: no TCP port at all), mode 0700."""

    def __init__(
        self,
        port: int | None = None,
        memory_mb: int = 64,
        extra: Sequence[str] = (),
        tls: TlsFiles | None = None,
        client_certs: bool = False,
        unix_socket: Path | None = None,
    ) -> None:
        if MEMCACHED is None:
            raise RuntimeError(
                "no memcached on PATH: scripts/test installs it (apt-get install memcached)"
            )
        if unix_socket is not None and (port is not None or tls is not None):
            raise ValueError("a memcached on a Unix socket has no port and no TLS")
        self.unix_socket = unix_socket
        self.port = 0 if unix_socket is not None else port or free_port()
        self.tls = tls
        self.plain_port = free_port() if tls is not None else self.port
        listen = ["-l", HOST, "-p", str(self.port)]
        if unix_socket is not None:
            listen = ["-s", str(unix_socket), "-a", "700"]
        elif tls is not None:
            ssl_options = f"ssl_chain_cert={tls.cert},ssl_key={tls.key}"
            if client_certs:  # 2: a client certificate is required
                ssl_options += f",ssl_ca_cert={tls.ca},ssl_verify_mode=2"
            listen = [
                *("-l", f"{HOST}:{self.port}", "-l", f"notls:{HOST}:{self.plain_port}"),
                *("-Z", "-o", ssl_options),
            ]
        # -U 0: no UDP; -u root only matters when run as root, where memcached insists on it.
        self.process = subprocess.Popen(
            [
                MEMCACHED,
                *listen,
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
        """The store URL; with TLS, trusting the test CA; on a socket, ``memcache:///PATH``."""
        if self.unix_socket is not None:
            return f"memcache://{quote(str(self.unix_socket))}"
        if self.tls is None:
            return f"memcache://{HOST}:{self.port}"
        return f"memcaches://{HOST}:{self.port}?ssl_ca_certs={quote(str(self.tls.ca), safe='')}"

    @property
    def address(self) -> tuple[str, int]:
        """Where the tests' own looks go over TCP (the plain port of a TLS server)."""
        if self.unix_socket is not None:
            raise ValueError(f"memcached on {self.unix_socket} has no TCP address: connect()")
        return HOST, self.plain_port

    def connect(self, timeout: float = 2) -> socket.socket:
        """A connection of the tests' own: to ``address``, or to the Unix socket."""
        if self.unix_socket is None:
            return socket.create_connection(self.address, timeout=timeout)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(str(self.unix_socket))
        except BaseException:
            sock.close()
            raise
        return sock

    def command(self, request: bytes) -> bytes:
        """Send one raw request and return what the server answers first (tests' own look)."""
        with self.connect() as sock:
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
        with self.connect() as sock:
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
                where = self.unix_socket or f"port {self.port}"
                raise RuntimeError(f"memcached on {where} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()
