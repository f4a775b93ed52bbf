"""The memcache store's servers, which one holds an item, and the blocking wire to them.

``Servers`` places an item on one of the servers by rendezvous hashing (each server
scores the item's name; the highest wins), so adding or removing a server moves only
the items of that server. A server is a TCP ``host:port`` or a Unix socket's path, and
is scored by that name. ``BlockingLink`` keeps a pool of sockets per server, one
request and its reply at a time on each (``_memcache_pipe`` is the asyncio store's
wire). Every failure to reach a server, or to hear from it within the timeout, is a
``StorageUnavailableError``; the connection it happened on is dropped, since a reply
may still be on its way on it.

A store runs each step on one connection (``take``/``connection``), taken before the
step looks at its cache: a CAS number is only meaningful to the server process that
gave it, and a restarted memcached numbers its writes from 1 again. So every new
connection calls ``on_connect`` (the store forgets its cached values), and a step whose
connection is lost fails rather than going on over another one. A pooled socket the
server closed while it sat idle (a restart) is noticed and replaced before use.
"""

from __future__ import annotations

import hashlib
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence

from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_url import Address, shown

__all__ = ["BlockingLink", "Servers", "failure", "reply_failure", "tls_host"]


class Servers:
    """The servers, and the one that holds each item."""

    __slots__ = ("_hashes", "addresses", "names")

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = tuple(addresses)
        self.names = tuple(shown(address) for address in self.addresses)
        # A server's score is a hash of its name and the item's. Not CRC-32 seeded with the
        # server: a CRC is affine, so the order of two seeded CRCs of one name hangs on one
        # bit of the name's own CRC, and 3 servers took 50%, 25% and 25% of the items.
        self._hashes = tuple(
            hashlib.blake2b(name.encode() + b"\n", digest_size=8) for name in self.names
        )

    def of(self, name: bytes) -> int:
        """The index of the server that holds item ``name``."""
        if len(self._hashes) == 1:
            return 0
        scores = []
        for server in self._hashes:
            score = server.copy()
            score.update(name)
            scores.append(score.digest())
        return scores.index(max(scores))


def failure(server: str, what: str) -> StorageUnavailableError:
    return StorageUnavailableError(f"memcached {server}: {what}")


def reply_failure(server: str, error: wire.ReplyError) -> StorageError:
    if error.transient:
        return failure(server, str(error))
    if str(error) == "ERROR":  # an unknown command: the meta commands came in 1.6
        return StorageError(
            f"memcached {server} does not know the store's commands (ERROR): the memcache "
            "store needs memcached 1.6 or later (its meta protocol)"
        )
    return StorageError(f"memcached {server} refused a request: {error}")


def tls_host(address: Address) -> str | None:
    """The name a server's certificate is checked against (a socket has none: the store
    refuses TLS to one, ``_memcache_url``)."""
    return None if isinstance(address, str) else address[0]


def _open(address: Address, timeout: float) -> socket.socket:
    """A connected socket to ``address`` (TCP or a Unix socket), within ``timeout``."""
    if not isinstance(address, str):
        sock = socket.create_connection(address, timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


class _Socket:
    __slots__ = ("broken", "name", "parser", "sock")

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.name = name
        self.parser = wire.Parser()
        self.broken = False


def _idle_ok(sock: socket.socket) -> bool:
    """Whether an idle socket is still open: nothing to read. EOF (the server closed it, as
    a restart does) or bytes nobody asked for mean it must not be used."""
    if isinstance(sock, ssl.SSLSocket):
        # TLS takes no peek; anything readable (a close_notify, EOF) rules it out too.
        if sock.pending():
            return False
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        try:
            return not poller.poll(0)
        except OSError:
            return False
    try:
        sock.setblocking(False)
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


class BlockingLink:
    """Blocking sockets, pooled per server (over TLS with ``tls``); safe to share between
    threads."""

    def __init__(
        self,
        timeout: float,
        on_connect: Callable[[], None] = lambda: None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout = timeout
        self.on_connect = on_connect
        self.tls = tls
        self._idle: dict[Address, list[_Socket]] = {}
        self._listed: frozenset[Address] | None = None  # None: every server is
        self._lock = threading.Lock()

    def call(self, address: Address, request: bytes) -> wire.Reply:
        """Send ``request`` to the server at ``address`` and return its reply."""
        conn = self.take(address)
        try:
            return self.exchange(conn, request)
        finally:
            self.give(address, conn)

    def exchange(self, conn: _Socket, request: bytes) -> wire.Reply:
        """Send ``request`` on ``conn`` and return its reply."""
        name = conn.name
        if conn.broken:
            raise failure(name, "the connection was lost")
        conn.broken = True  # until the reply is read whole
        deadline = time.monotonic() + self.timeout
        try:
            conn.sock.settimeout(self.timeout)
            conn.sock.sendall(request)
            while True:
                replies = conn.parser.replies()
                if replies:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                conn.sock.settimeout(left)
                data = conn.sock.recv(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                conn.parser.feed(data)
        except TimeoutError:
            raise failure(name, f"no reply within {self.timeout:g} s") from None
        except (OSError, ValueError) as exc:
            raise failure(name, f"{type(exc).__name__}: {exc}") from None
        reply = replies[0]
        if isinstance(reply, wire.ReplyError):
            raise reply_failure(name, reply)
        if len(replies) > 1:
            raise failure(name, "more replies than requests")
        conn.broken = False
        return reply

    def take(self, address: Address) -> _Socket:
        """A connection to ``address`` for a step: an idle one still open, or a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(address)
                conn = idle.pop() if idle else None
            if conn is None:
                break
            if _idle_ok(conn.sock):
                return conn
            conn.sock.close()
        name = shown(address)
        try:
            sock = _open(address, self.timeout)
        except OSError as exc:
            raise failure(name, f"cannot connect: {exc}") from None
        if self.tls is not None:
            try:  # the handshake, within the timeout
                sock = self.tls.wrap_socket(sock, server_hostname=tls_host(address))
            except (OSError, ValueError) as exc:
                sock.close()
                raise failure(name, f"TLS handshake failed: {exc}") from None
        self.on_connect()
        return _Socket(sock, name)

    def give(self, address: Address, conn: _Socket) -> None:
        """Back to the pool, or closed when a reply may still be on its way on it."""
        if conn.broken:
            conn.sock.close()
            return
        with self._lock:
            if self._listed is None or address in self._listed:
                self._idle.setdefault(address, []).append(conn)
                return
        conn.sock.close()  # its server is no longer listed

    def keep(self, addresses: Sequence[Address]) -> None:
        """Close the pooled connections to every server not in ``addresses`` (no longer
        listed); one in use is closed when it is given back."""
        with self._lock:
            self._listed = frozenset(addresses)
            gone = [address for address in self._idle if address not in addresses]
            conns = [conn for address in gone for conn in self._idle.pop(address)]
        for conn in conns:
            conn.sock.close()

    def close(self) -> None:
        with self._lock:
            conns = [conn for idle in self._idle.values() for conn in idle]
            self._idle.clear()
        for conn in conns:
            conn.sock.close()
