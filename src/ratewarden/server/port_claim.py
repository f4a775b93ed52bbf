"""One ``--workers`` set per port: the parent claims the ports before its workers bind them.

Workers share their ports through SO_REUSEPORT, which lets any other process of the same
user bind them as well: a second ``ratewarden serve --workers`` on the same ports would
start beside the first and split the connections with it. So before it starts its
workers, the parent (``server/process.py``), for each port they will bind:

- binds the port once *without* SO_REUSEPORT, then closes it: a port something already
  listens on (another set's workers, or any other server) refuses that, as it refuses a
  single ``ratewarden serve``, and the command exits 1 with the same one line;
- then holds a lock until it exits (Linux): a Unix socket bound to a name in the abstract
  namespace, which belongs to the network namespace the ports belong to and is released
  with the process however it ends, SIGKILL included. Two sets started at the same instant
  would both pass the trial bind before either listens; only one gets the lock.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
from typing import TYPE_CHECKING

from ratewarden.server.grpc import bind_refusal, cannot_listen, grpc_address

if TYPE_CHECKING:
    from ratewarden.server.settings import Settings

__all__ = ["claim_ports", "lock_name"]


def lock_name(host: str, port: int) -> bytes:
    """The abstract socket name that locks ``host:port`` (a leading NUL: no file)."""
    return f"\0ratewarden/tcp/{_address(host, port)}/{port}".encode()


def claim_ports(settings: Settings) -> list[socket.socket]:
    """Lock and check every port ``settings`` have the workers bind; the locks, to close
    when the workers are done. ``OSError`` naming the first port that is taken (the locks
    already taken are released)."""
    held: list[socket.socket] = []
    try:
        seen = set()
        for what, host, port in _ports(settings):
            if port == 0 or (key := (_address(host, port), port)) in seen:
                continue
            seen.add(key)
            address = grpc_address(host, port)
            refused = bind_refusal(host, port, reuse_port=False)
            if refused is not None:
                raise cannot_listen(address, host, refused, what=what)
            if sys.platform == "linux":
                lock = _lock(host, port)
                if lock is None:
                    raise OSError(
                        errno.EADDRINUSE,
                        f"cannot listen for {what} on {address}: the port is claimed by "
                        "another ratewarden serve --workers, still starting",
                    )
                held.append(lock)
    except BaseException:
        for lock in held:
            lock.close()
        raise
    return held


def _ports(settings: Settings) -> list[tuple[str, str, int]]:
    s = settings
    ports = [("gRPC", s.grpc_host or s.host, s.grpc_port), ("HTTP", s.host, s.http_port)]
    if s.debug_port is not None:
        ports.append(("the debug port", s.debug_host or s.host, s.debug_port))
    if s.metrics_port is not None:
        ports.append(("metrics", s.metrics_host or s.host, s.metrics_port))
    return ports


def _address(host: str, port: int) -> str:
    """``host`` as the address it binds (a name resolved), so that two spellings of one
    address take one lock."""
    with contextlib.suppress(OSError):
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        return str(found[0][4][0])
    return host


def _lock(host: str, port: int) -> socket.socket | None:
    """The lock of ``host:port`` held, or None when another process holds it."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind(lock_name(host, port))
    except OSError as exc:
        lock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise
    return lock
