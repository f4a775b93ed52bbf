"""The memcache store's connections: the servers a URL names, which one holds an item, and
the wire to it.

``Servers`` places an item on one of the servers by rendezvous hashing (each server
scores the item's name; the highest wins), so adding or removing a server moves only
the items of that server. ``BlockingLink`` keeps a pool of sockets per server, one
request and its reply at a time on each; ``AsyncLink`` keeps one connection per server
on the running loop and writes the requests of one turn of the loop together, the
replies coming back in order. Every failure to reach a server, or to hear from it
within the timeout, is a ``StorageUnavailableError``; the connection it happened on
is dropped, since a reply may still be on its way on it.

A store runs each step on one connection (``take``/``connection``), taken before the
step looks at its cache: a CAS number is only meaningful to the server process that
gave it, and a restarted memcached numbers its writes from 1 again. So every new
connection calls ``on_connect`` (the store forgets its cached values), and a step whose
connection is lost fails rather than going on over another one. A pooled socket the
server closed while it sat idle (a restart) is noticed and replaced before use.
"""

from __future__ import annotations

import asyncio
import hashlib
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_url import Address, shown

__all__ = ["AsyncLink", "BlockingLink", "Servers", "failure"]


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


def _reply_failure(server: str, error: wire.ReplyError) -> StorageError:
    if error.transient:
        return failure(server, str(error))
    if str(error) == "ERROR":  # an unknown command: the meta commands came in 1.6
        return StorageError(
            f"memcached {server} does not know the store's commands (ERROR): the memcache "
            "store needs memcached 1.6 or later (its meta protocol)"
        )
    return StorageError(f"memcached {server} refused a request: {error}")


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
            raise _reply_failure(name, reply)
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
            sock = socket.create_connection(address, timeout=self.timeout)
        except OSError as exc:
            raise failure(name, f"cannot connect: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:  # the handshake, within the timeout
                sock = self.tls.wrap_socket(sock, server_hostname=address[0])
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


class _Connection(asyncio.Protocol):
    """One connection to a server: requests written in order, each reply to its waiter."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parser = wire.Parser()
        self.waiters: deque[asyncio.Future[wire.Reply]] = deque()
        self.transport: asyncio.Transport | None = None
        self.outgoing: list[bytes] = []
        self.closed = False
        self.retired = False  # its server is no longer listed: closed once nothing waits

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[wire.Reply]:
        future: asyncio.Future[wire.Reply] = loop.create_future()
        self.waiters.append(future)
        if not self.outgoing:
            loop.call_soon(self._flush)  # the requests of this turn of the loop, in one write
        self.outgoing.append(request)
        return future

    def _flush(self) -> None:
        if self.outgoing and self.transport is not None and not self.closed:
            self.transport.write(b"".join(self.outgoing))
        self.outgoing.clear()

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        try:
            replies = self.parser.replies()
        except ValueError as exc:
            self.fail(failure(self.name, str(exc)))
            return
        for reply in replies:
            if not self.waiters:
                self.fail(failure(self.name, "more replies than requests"))
                return
            waiter = self.waiters.popleft()
            if isinstance(reply, wire.ReplyError):
                if not waiter.done():
                    waiter.set_exception(_reply_failure(self.name, reply))
                self.fail(failure(self.name, f"connection dropped after {reply}"))
                return
            if not waiter.done():
                waiter.set_result(reply)
        if self.retired and not self.waiters:
            self.retire()

    def retire(self) -> None:
        """Close once no request waits on it (now, if none does)."""
        self.retired = True
        if not self.waiters and not self.outgoing and not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(failure(self.name, "the connection was lost" + (f": {exc}" if exc else "")))

    def fail(self, error: StorageError) -> None:
        """Drop the connection; every request still waiting on it fails with ``error``."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # retrieved: a cancelled caller leaves no warning


class AsyncLink:
    """One connection per server on the running loop (over TLS with ``tls``), opened on
    first use and after a failure."""

    def __init__(
        self,
        timeout: float,
        on_connect: Callable[[], None] = lambda: None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout = timeout
        self.on_connect = on_connect
        self.tls = tls
        self._conns: dict[Address, _Connection] = {}
        self._opening: dict[Address, asyncio.Future[_Connection]] = {}

    async def connection(self, address: Address) -> _Connection:
        """The open connection to ``address``, opened if there is none."""
        conn = self._conns.get(address)
        if conn is None or conn.closed:
            conn = await self._connect(address)
        return conn

    async def call(self, conn: _Connection, request: bytes) -> wire.Reply:
        """Send ``request`` on ``conn`` and return its reply; a lost ``conn`` is not replaced."""
        if conn.closed:
            raise failure(conn.name, "the connection was lost")
        loop = asyncio.get_running_loop()
        future = conn.send(request, loop)
        timer = loop.call_later(self.timeout, _expire, conn, future, self.timeout)
        try:
            return await future
        finally:
            timer.cancel()

    async def _connect(self, address: Address) -> _Connection:
        opening = self._opening.get(address)
        if opening is not None:
            return await asyncio.shield(opening)
        loop = asyncio.get_running_loop()
        opening = self._opening[address] = loop.create_future()
        name = shown(address)
        host, port = address
        tls: dict[str, Any] = {}
        if self.tls is not None:
            tls = {"ssl": self.tls, "server_hostname": host, "ssl_handshake_timeout": self.timeout}
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can lose a cancellation
            # that lands as the connection is made (CPython gh-86296).
            async with asyncio.timeout(self.timeout):
                _, conn = await loop.create_connection(lambda: _Connection(name), host, port, **tls)
        except BaseException as exc:  # a cancelled opener must not leave the others waiting
            why = str(exc) or f"no answer within {self.timeout:g} s"
            error = failure(name, f"cannot connect: {why}")
            opening.set_exception(error)
            opening.exception()
            if isinstance(exc, OSError):  # TimeoutError and ssl.SSLError are ones
                raise error from None
            raise
        finally:
            del self._opening[address]
        self._conns[address] = conn
        self.on_connect()
        opening.set_result(conn)
        return conn

    def keep(self, addresses: Sequence[Address]) -> None:
        """Retire the connections to every server not in ``addresses`` (no longer listed):
        the requests on them get their replies, then they close."""
        for address in [address for address in self._conns if address not in addresses]:
            self._conns.pop(address).retire()

    def close(self) -> None:
        for conn in self._conns.values():
            if conn.transport is not None:
                conn.closed = True
                conn.transport.close()
        self._conns.clear()


def _expire(conn: _Connection, future: asyncio.Future[wire.Reply], timeout: float) -> None:
    if not future.done():
        # A reply may still come; the connection's order can no longer be trusted.
        conn.fail(failure(conn.name, f"no reply within {timeout:g} s"))
