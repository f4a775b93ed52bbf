"""A real DNS server on loopback for the memcache store's SRV tests: dnsmasq (Debian package
``dnsmasq-base``, installed by scripts/test), answering SRV records the test gives and nothing
else (no upstream resolver, no /etc/hosts)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence

from tests._servers import HOST, START_TIMEOUT_S, free_port

__all__ = ["DNSMASQ", "DnsServer"]

#: The dnsmasq binary (often in /usr/sbin, off a user's PATH), or None.
DNSMASQ = shutil.which("dnsmasq") or (
    "/usr/sbin/dnsmasq" if os.access("/usr/sbin/dnsmasq", os.X_OK) else None
)

#: An SRV record as dnsmasq's --srv-host takes it: (name, target, port).
Srv = tuple[str, str, int]


class DnsServer:
    """dnsmasq on 127.0.0.1:``port`` (UDP and TCP) with ``records``; ``serve`` starts it again
    on the same port with other records (dnsmasq reads --srv-host only at its start)."""

    def __init__(self, records: Sequence[Srv]) -> None:
        if DNSMASQ is None:
            raise RuntimeError(
                "no dnsmasq: scripts/test installs it (apt-get install dnsmasq-base)"
            )
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.serve(records)

    @property
    def nameserver(self) -> str:
        """The URL option's value: ``nameserver=127.0.0.1:PORT``."""
        return f"{HOST}:{self.port}"

    def serve(self, records: Sequence[Srv]) -> None:
        self.stop()
        assert DNSMASQ is not None
        srv = [f"--srv-host={name},{target},{port}" for name, target, port in records]
        self.process = subprocess.Popen(
            [
                DNSMASQ,
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                f"--listen-address={HOST}",
                f"--port={self.port}",
                "--pid-file=",
                *(["--user=root"] if os.geteuid() == 0 else []),  # else it cannot switch
                "--cache-size=0",
                *srv,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                assert self.process.stderr is not None
                raise RuntimeError(f"dnsmasq exited: {self.process.stderr.read().decode()}")
            try:  # it listens on TCP too once it serves
                with socket.create_connection((HOST, self.port), timeout=1):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dnsmasq on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None
