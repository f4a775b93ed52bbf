"""Lean synchronous request/reply over connections that redis-py sets up.

redis-py makes each connection (TCP, Unix socket or TLS; AUTH, SELECT, client
name; Sentinel asking for the current primary) and we then drive its socket
ourselves: one pre-packed command out, one hiredis-parsed reply in (or several
pipelined: ``send`` then ``receive``). That skips
redis-py's per-command work (pool checkout, health checks, response callbacks,
observability hooks), which costs more than the round trip on loopback.

A ``LinkPool`` keeps idle links for reuse, one in use per thread at a time. Our
connections use the store's timeout for connect and for each read, and never
retry on their own: a rate limit decision is not idempotent, so only replies
that prove nothing ran are retried (see ``_redis_protocol.Recovery``).
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import weakref
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import hiredis
from redis import exceptions as rx
from redis.connection import ConnectionPool

from ratewarden.storage._redis_errors import REDIS_ERRORS, connect_failure, gave_password, refusal
from ratewarden.storage._redis_protocol import ConnectFailed, ConnectionFactory
from ratewarden.storage._redis_server import HELLO, ServerUnusable, check_hello

__all__ = ["DEFAULT_SPIN", "Link", "LinkPool", "connection_kwargs", "describe"]

_READ_SIZE = 65_536

#: Seconds a link polls its socket for the reply before it sleeps in ``poll`` (see ``Link``).
DEFAULT_SPIN = 0.0001

#: Requests a link sends without spinning after a reply took longer than its spin.
SPIN_BACKOFF = 64


def connection_kwargs(base: dict[str, Any], timeout: float) -> dict[str, Any]:
    """A pool's connection options with what the store imposes on its own connections."""
    kwargs = {
        **base,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": None,
        "retry_on_error": [],
        "retry_on_timeout": False,
        # Script replies are plain arrays of integers; RESP2 keeps push
        # messages (client tracking, maintenance notices) off our sockets.
        "protocol": 2,
    }
    if "maint_notifications_config" in kwargs:
        kwargs["maint_notifications_config"] = None
    return kwargs


def describe(kwargs: dict[str, Any]) -> str:
    """Where a connection made from ``kwargs`` goes, for error messages."""
    pool = kwargs.get("connection_pool")
    service = getattr(pool, "service_name", None)
    if service is not None:
        return f"Sentinel service {service!r}"
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _stale(sock: socket.socket, timeout: float | None) -> bool:
    """Whether an idle socket that polls readable was closed (or spoke out of turn)."""
    sock.setblocking(False)
    try:
        # EOF (b"") means the server closed it; any byte is one we never asked for.
        sock.recv(1)
        return True
    except (BlockingIOError, ssl.SSLWantReadError):
        # Only TLS housekeeping (a session ticket) was waiting: the link is fine.
        return False
    except OSError:
        return True
    finally:
        if timeout is not None:
            sock.settimeout(timeout)


class Link:
    """One connection to one server, used by one thread at a time.

    A plain (TCP or Unix) socket is non-blocking: the request is sent at once
    and one ``poll`` waits for the reply, bounded by the timeout. A socket with
    a timeout would ``poll`` before the send and before every read as well, and
    on a loopback round trip of tens of microseconds those system calls are a
    large part of the client's cost. A TLS socket keeps its timeout (its reads
    may need the TLS engine's buffered bytes, which ``poll`` cannot see).

    Before it sleeps in ``poll``, a link spins: it tries to read the reply for up
    to ``spin`` seconds (100 us by default). A thread asleep in ``poll`` is woken
    by the kernel when the reply lands, and on a virtual machine that wake-up
    alone can take longer than Redis takes to answer; a reply from the same host
    usually arrives within the spin. A reply that takes longer (a Redis across a
    network) costs one spin, and the link then sleeps at once for its next
    ``SPIN_BACKOFF`` requests before it tries spinning again, so a distant server
    costs about 1/64 of a spin per request. ``spin=0`` never spins.
    """

    __slots__ = (
        "_conn",
        "_make",
        "_poll",
        "_reader",
        "_skip",
        "_sock",
        "_spin_ns",
        "_timeout",
        "_timeout_ms",
        "_tls",
        "generation",
        "where",
    )

    def __init__(
        self, make: ConnectionFactory, where: str, timeout: float, spin: float = DEFAULT_SPIN
    ) -> None:
        self._make = make
        self._timeout = timeout
        self._timeout_ms = timeout * 1_000
        self._spin_ns = int(spin * 1e9)
        self._skip = 0
        self.where = where
        #: The pool's generation when the link was last (re)taken (see ``LinkPool.retire``).
        self.generation = 0
        self._conn: Any = None
        self._sock: socket.socket | None = None
        self._tls = False
        self._reader = hiredis.Reader()
        self._poll: Callable[[float], list[Any]] = _never_ready

    def request(self, packed: bytes) -> Any:
        """Send one packed command and return its reply (error replies as values)."""
        sock = self._ready()
        try:
            self._send(sock, packed)
            reader = self._reader
            while True:
                reader.feed(self._more(sock))
                reply = reader.gets()
                if reply is not False:
                    return reply
        except BaseException:
            # A half-read reply would be read as the answer to the next request.
            self.close()
            raise

    def send(self, packed: bytes) -> None:
        """Send packed commands (several, pipelined) without waiting: ``receive`` reads the
        replies. Nothing else may be sent on the link in between."""
        sock = self._ready()
        try:
            self._send(sock, packed)
        except BaseException:
            self.close()
            raise

    def receive(self, count: int) -> list[Any]:
        """The replies to the ``count`` commands ``send`` sent, in order (error replies as
        values); each wait for more bytes is bounded by the timeout."""
        sock, reader = self._sock, self._reader
        replies: list[Any] = []
        try:
            while len(replies) < count:
                reply = reader.gets()
                if reply is not False:
                    replies.append(reply)
                elif sock is None:
                    raise rx.ConnectionError(f"nothing was sent to {self.where}")
                else:
                    reader.feed(self._more(sock))
        except BaseException:
            self.close()
            raise
        return replies

    def _ready(self) -> socket.socket:
        sock = self._sock
        # An idle link that polls readable was closed by the server (a restart, an idle
        # timeout, CLIENT KILL): replace it before sending rather than fail this request.
        if sock is None or (
            self._poll(0) and _stale(sock, None if not self._tls else self._timeout)
        ):
            sock = self._open()
        return sock

    def _send(self, sock: socket.socket, packed: bytes) -> None:
        if self._tls:
            sock.sendall(packed)
            return
        try:
            sent = sock.send(packed)
        except BlockingIOError:  # the socket buffer is full: wait in _send_rest
            sent = 0
        if sent < len(packed):
            self._send_rest(sock, memoryview(packed)[sent:])

    def _more(self, sock: socket.socket) -> bytes:
        """The next bytes of a reply. A plain socket is read within the spin, then waited
        for in ``poll`` within the timeout; a TLS socket is read with its timeout."""
        data = sock.recv(_READ_SIZE) if self._tls else None
        if data is None and self._spin_ns:
            if self._skip:
                self._skip -= 1
            else:
                data = self._spin(sock)
        while data is None:
            if not self._poll(self._timeout_ms):
                raise rx.TimeoutError(f"no reply from {self.where} in time")
            try:
                data = sock.recv(_READ_SIZE)
            except BlockingIOError:  # woken with nothing to read after all
                continue
        if not data:
            raise rx.ConnectionError(f"{self.where} closed the connection")
        return data

    def _spin(self, sock: socket.socket) -> bytes | None:
        """The first bytes of the reply if they come within the spin; None if not yet."""
        deadline = perf_counter_ns() + self._spin_ns
        recv = sock.recv
        while True:
            try:
                data = recv(_READ_SIZE)
            except BlockingIOError:
                if perf_counter_ns() < deadline:
                    continue
                self._skip = SPIN_BACKOFF
                return None
            if not data:
                raise rx.ConnectionError(f"{self.where} closed the connection")
            return data

    def _send_rest(self, sock: socket.socket, rest: memoryview) -> None:
        """The rare large request that the socket buffer did not take at once."""
        wait = _waiter(sock, writing=True)
        while rest:
            if not wait(self._timeout_ms):
                raise rx.TimeoutError(f"{self.where} took no request bytes in time")
            try:
                rest = rest[sock.send(rest) :]
            except BlockingIOError:
                continue

    def _open(self) -> socket.socket:
        self.close()
        conn = self._make()
        try:
            conn.connect()
            _hello(conn, self.where)
        except ServerUnusable:
            conn.disconnect()
            raise
        except REDIS_ERRORS as exc:
            conn.disconnect()
            refused = refusal(exc, self.where, password_given=gave_password(conn))
            if refused is not None:
                raise refused from exc
            raise ConnectFailed(connect_failure(self.where, exc)) from exc
        sock: socket.socket = conn._sock  # private, but stable since redis-py 2
        self._conn = conn
        self._sock = sock
        self._tls = isinstance(sock, ssl.SSLSocket)
        if not self._tls:
            sock.setblocking(False)
        self._reader = hiredis.Reader()
        self._poll = _waiter(sock)
        return sock

    def close(self) -> None:
        conn = self._conn
        self._conn = self._sock = None
        self._poll = _never_ready
        if conn is not None:
            conn.disconnect()


def _hello(conn: Any, where: str) -> None:
    """Ask a new connection's server what it is; ``ServerUnusable`` for a Redis that cannot
    run the scripts (``_redis_server``). An error reply (``HELLO`` unknown, or refused by
    an ACL) cannot tell, and passes."""
    conn.send_command(*HELLO)
    try:
        reply = conn.read_response()
    except rx.ResponseError:
        return
    check_hello(reply, where)


def _never_ready(timeout: float) -> list[Any]:
    return []


def _waiter(sock: socket.socket, writing: bool = False) -> Callable[[float], list[Any]]:
    """``wait(ms)``: a non-empty list once ``sock`` can be read (or written), within ``ms``.

    A closed or failed socket counts as readable: the read that follows says why.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLOUT if writing else select.POLLIN)
        return poller.poll
    if writing:  # pragma: no cover - Windows has no poll()
        return lambda ms: select.select([], [sock], [], ms / 1_000)[1]
    return lambda ms: select.select([sock], [], [], ms / 1_000)[0]  # pragma: no cover


_POOLS: weakref.WeakSet[LinkPool] = weakref.WeakSet()


class LinkPool:
    """Idle links to one server. ``take`` one, use it, ``give`` it back."""

    __slots__ = (
        "__weakref__",
        "_closed",
        "_free",
        "_make",
        "_spin",
        "_timeout",
        "generation",
        "where",
    )

    def __init__(
        self, make: ConnectionFactory, where: str, timeout: float, spin: float = DEFAULT_SPIN
    ) -> None:
        self._make = make
        self._timeout = timeout
        self._spin = spin
        self.where = where
        self._free: list[Link] = []
        self._closed = False
        self.generation = 0
        _POOLS.add(self)

    @classmethod
    def for_pool(cls, pool: ConnectionPool, timeout: float, spin: float = DEFAULT_SPIN) -> LinkPool:
        """Links made like ``pool``'s connections, with the store's timeouts and spin."""
        kwargs = connection_kwargs(pool.connection_kwargs, timeout)
        connection_class = pool.connection_class
        return cls(lambda: connection_class(**kwargs), describe(kwargs), timeout, spin)

    def take(self) -> Link:
        # list.pop and list.append are atomic under the GIL: no lock needed.
        try:
            link = self._free.pop()
        except IndexError:
            link = Link(self._make, self.where, self._timeout, self._spin)
            link.generation = self.generation
            return link
        if link.generation != self.generation:  # connected before ``retire``: connect again
            link.close()
            link.generation = self.generation
        return link

    def retire(self) -> None:
        """Make every link connect again before its next request (the one in flight on a
        link in use finishes first): the server they reach stopped being the primary."""
        self.generation += 1

    def give(self, link: Link) -> None:
        if self._closed:
            link.close()
        else:
            self._free.append(link)

    def close(self) -> None:
        self._closed = True
        free, self._free = self._free, []
        for link in free:
            link.close()

    def _forget(self) -> None:
        # In a forked child the sockets belong to the parent: drop, never shut down.
        self._free = []


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
