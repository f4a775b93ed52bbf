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
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.storage import _memcache_wire as wire

__all__ = [
    "DEFAULT_PORT",
    "AsyncLink",
    "BlockingLink",
    "Servers",
    "check_addresses",
    "failure",
    "parse_url",
]

Address = tuple[str, int]

DEFAULT_PORT = 11211
_SCHEMES = ("memcache", "memcached")


def parse_url(url: str) -> tuple[Address, ...]:
    """The servers of ``memcache://HOST[:PORT][,HOST[:PORT]...]`` (``memcached://`` too;
    an IPv6 address in brackets; the port 11211 when left out)."""
    scheme, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
    if not sep or scheme.lower() not in _SCHEMES:
        raise ConfigurationError(
            f"memcache URL {url!r} must start with memcache:// and list HOST:PORT, comma-separated"
        )
    if rest.endswith("/"):
        rest = rest[:-1]
    if any(mark in rest for mark in "/?#@"):
        raise ConfigurationError(
            f"memcache URL {url!r}: only HOST:PORT pairs, comma-separated (no path, options or "
            "user: memcached has no databases and the store no options in its URL)"
        )
    return check_addresses([_address(url, part.strip()) for part in rest.split(",")], url)


def _address(url: str, part: str) -> Address:
    if part.startswith("["):
        host, close, tail = part[1:].partition("]")
        if not close or (tail and not tail.startswith(":")):
            raise ConfigurationError(f"memcache URL {url!r}: {part!r} is not [IPv6]:PORT")
        colon, port_text = tail[:1], tail[1:]
    else:
        host, colon, port_text = part.partition(":")
    if not host or any(c.isspace() for c in host):
        raise ConfigurationError(f"memcache URL {url!r}: a server without a host ({part!r})")
    if not colon:
        return host, DEFAULT_PORT
    # ASCII digits only: str.isdigit() also takes '²' (which int() refuses) and '١٢'.
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ConfigurationError(f"memcache URL {url!r}: port {port_text!r} is not 1-65535")
    return host, int(port_text)


def check_addresses(addresses: Sequence[object], url: str | None = None) -> tuple[Address, ...]:
    """``addresses`` as ``(host, port)`` pairs: a non-empty host, a port 1-65535, none twice."""
    where = f"memcache URL {url!r}" if url is not None else "memcache servers"
    found: list[Address] = []
    for address in addresses:
        if (
            not isinstance(address, tuple)
            or len(address) != 2
            or not isinstance(address[0], str)
            or not address[0]
            or isinstance(address[1], bool)
            or not isinstance(address[1], int)
            or not 0 < address[1] < 65536
        ):
            raise ConfigurationError(f"{where}: {address!r} is not a (host, port 1-65535) pair")
        found.append(address)
    if not found:
        raise ConfigurationError("a memcache store needs at least one server")
    if len(set(found)) != len(found):
        raise ConfigurationError(f"{where} names a server twice")
    return tuple(found)


class Servers:
    """The servers, and the one that holds each item."""

    __slots__ = ("_hashes", "addresses", "names")

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = tuple(addresses)
        self.names = tuple(_shown(address) for address in self.addresses)
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
    __slots__ = ("broken", "parser", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = wire.Parser()
        self.broken = False


def _idle_ok(sock: socket.socket) -> bool:
    """Whether an idle socket is still open: nothing to read. EOF (the server closed it, as
    a restart does) or bytes nobody asked for mean it must not be used."""
    try:
        sock.setblocking(False)
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


class BlockingLink:
    """Blocking sockets, pooled per server; safe to share between threads."""

    def __init__(
        self, servers: Servers, timeout: float, on_connect: Callable[[], None] = lambda: None
    ) -> None:
        self.servers = servers
        self.timeout = timeout
        self.on_connect = on_connect
        self._idle: list[list[_Socket]] = [[] for _ in servers.addresses]
        self._lock = threading.Lock()

    def call(self, server: int, request: bytes) -> wire.Reply:
        """Send ``request`` to ``server`` and return its reply."""
        conn = self.take(server)
        try:
            return self.exchange(server, conn, request)
        finally:
            self.give(server, conn)

    def exchange(self, server: int, conn: _Socket, request: bytes) -> wire.Reply:
        """Send ``request`` on ``conn`` (taken for ``server``) and return its reply."""
        name = self.servers.names[server]
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

    def take(self, server: int) -> _Socket:
        """A connection to ``server`` for a step: an idle one still open, or a new one."""
        while True:
            with self._lock:
                idle = self._idle[server]
                conn = idle.pop() if idle else None
            if conn is None:
                break
            if _idle_ok(conn.sock):
                return conn
            conn.sock.close()
        host, port = self.servers.addresses[server]
        try:
            sock = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as exc:
            raise failure(self.servers.names[server], f"cannot connect: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.on_connect()
        return _Socket(sock)

    def give(self, server: int, conn: _Socket) -> None:
        """Back to the pool, or closed when a reply may still be on its way on it."""
        if conn.broken:
            conn.sock.close()
            return
        with self._lock:
            self._idle[server].append(conn)

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

    def __init__(
        self, servers: Servers, timeout: float, on_connect: Callable[[], None] = lambda: None
    ) -> None:
        self.servers = servers
        self.timeout = timeout
        self.on_connect = on_connect
        self._conns: list[_Connection | None] = [None] * len(servers.addresses)
        self._opening: list[asyncio.Future[_Connection] | None] = [None] * len(servers.addresses)

    async def connection(self, server: int) -> _Connection:
        """The open connection to ``server``, opened if there is none."""
        conn = self._conns[server]
        if conn is None or conn.closed:
            conn = await self._connect(server)
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
            why = str(exc) or f"no answer within {self.timeout:g} s"
            error = failure(name, f"cannot connect: {why}")
            opening.set_exception(error)
            opening.exception()
            if isinstance(exc, OSError):  # TimeoutError is one
                raise error from None
            raise
        finally:
            self._opening[server] = None
        self._conns[server] = conn
        self.on_connect()
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
