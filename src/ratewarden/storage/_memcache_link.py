"""The memcache store's connections: which server holds an item, and the wire to it.

``Servers`` places an item on one of the servers by rendezvous hashing (each server
scores the item's name; the highest wins), so adding or removing a server moves only
the items of that server. ``BlockingLink`` keeps a pool of sockets per server, one
request and its reply at a time on each; ``AsyncLink`` keeps one connection per server
on the running loop and writes the requests of one turn of the loop together, the
replies coming back in order. Every failure to reach a server, or to hear from it
within the timeout, is a ``StorageUnavailableError``; the connection it happened on
is dropped, since a reply may still be on its way on it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Sequence

from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import _memcache_wire as wire

__all__ = ["AsyncLink", "BlockingLink", "Servers", "failure"]

Address = tuple[str, int]


class Servers:
    """The servers, and the one that holds each item."""

    __slots__ = ("_seeds", "addresses", "names")

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = tuple(addresses)
        self.names = tuple(_shown(address) for address in self.addresses)
        self._seeds = tuple(zlib.crc32(name.encode()) for name in self.names)

    def of(self, name: bytes) -> int:
        """The index of the server that holds item ``name``."""
        seeds = self._seeds
        if len(seeds) == 1:
            return 0
        scores = [zlib.crc32(name, seed) for seed in seeds]
        return scores.index(max(scores))


def _shown(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def failure(server: str, what: str) -> StorageUnavailableError:
    return StorageUnavailableError(f"memcached {server}: {what}")


def _reply_failure(server: str, error: wire.ReplyError) -> StorageError:
    if error.transient:
        return failure(server, str(error))
    return StorageError(f"memcached {server} refused a request: {error}")


class _Socket:
    __slots__ = ("parser", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = wire.Parser()


class BlockingLink:
    """Blocking sockets, pooled per server; safe to share between threads."""

    def __init__(self, servers: Servers, timeout: float) -> None:
        self.servers = servers
        self.timeout = timeout
        self._idle: list[list[_Socket]] = [[] for _ in servers.addresses]
        self._lock = threading.Lock()

    def call(self, server: int, request: bytes) -> wire.Reply:
        """Send ``request`` to ``server`` and return its reply."""
        name = self.servers.names[server]
        conn = self._take(server)
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
            conn.sock.close()
            raise failure(name, f"no reply within {self.timeout:g} s") from None
        except (OSError, ValueError) as exc:
            conn.sock.close()
            raise failure(name, f"{type(exc).__name__}: {exc}") from None
        reply = replies[0]
        if isinstance(reply, wire.ReplyError) or len(replies) > 1:
            conn.sock.close()
            if isinstance(reply, wire.ReplyError):
                raise _reply_failure(name, reply)
            raise failure(name, "more replies than requests")
        with self._lock:
            self._idle[server].append(conn)
        return reply

    def _take(self, server: int) -> _Socket:
        with self._lock:
            idle = self._idle[server]
            if idle:
                return idle.pop()
        host, port = self.servers.addresses[server]
        try:
            sock = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as exc:
            raise failure(self.servers.names[server], f"cannot connect: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Socket(sock)

    def close(self) -> None:
        with self._lock:
            for idle in self._idle:
                for conn in idle:
                    conn.sock.close()
                idle.clear()


class _Connection(asyncio.Protocol):
    """One connection to a server: requests written in order, each reply to its waiter."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parser = wire.Parser()
        self.waiters: deque[asyncio.Future[wire.Reply]] = deque()
        self.transport: asyncio.Transport | None = None
        self.outgoing: list[bytes] = []
        self.closed = False

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
    """One connection per server on the running loop, opened on first use and after a failure."""

    def __init__(self, servers: Servers, timeout: float) -> None:
        self.servers = servers
        self.timeout = timeout
        self._conns: list[_Connection | None] = [None] * len(servers.addresses)
        self._opening: list[asyncio.Future[_Connection] | None] = [None] * len(servers.addresses)

    async def call(self, server: int, request: bytes) -> wire.Reply:
        """Send ``request`` to ``server`` and return its reply."""
        conn = self._conns[server]
        if conn is None or conn.closed:
            conn = await self._connect(server)
        loop = asyncio.get_running_loop()
        future = conn.send(request, loop)
        timer = loop.call_later(self.timeout, _expire, conn, future, self.timeout)
        try:
            return await future
        finally:
            timer.cancel()

    async def _connect(self, server: int) -> _Connection:
        opening = self._opening[server]
        if opening is not None:
            return await asyncio.shield(opening)
        loop = asyncio.get_running_loop()
        opening = self._opening[server] = loop.create_future()
        name = self.servers.names[server]
        host, port = self.servers.addresses[server]
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(name), host, port), self.timeout
            )
        except BaseException as exc:  # a cancelled opener must not leave the others waiting
            error = failure(name, f"cannot connect: {exc or 'no answer within the timeout'}")
            opening.set_exception(error)
            opening.exception()
            if isinstance(exc, OSError):  # TimeoutError is one
                raise error from None
            raise
        finally:
            self._opening[server] = None
        self._conns[server] = conn
        opening.set_result(conn)
        return conn

    def close(self) -> None:
        for conn in self._conns:
            if conn is not None and conn.transport is not None:
                conn.closed = True
                conn.transport.close()
        self._conns = [None] * len(self._conns)


def _expire(conn: _Connection, future: asyncio.Future[wire.Reply], timeout: float) -> None:
    if not future.done():
        # A reply may still come; the connection's order can no longer be trusted.
        conn.fail(failure(conn.name, f"no reply within {timeout:g} s"))
