"""The asyncio memcache store's wire: one pipelined connection per server.

``AsyncLink`` keeps one connection per server (over TCP, TLS or a Unix socket) on the
running loop, opened on first use and after a failure, and writes the requests of one
turn of the loop together, the replies coming back in order. As ``BlockingLink``
(``_memcache_link``): every failure to reach a server, or to hear from it within the
timeout, is a ``StorageUnavailableError`` and drops the connection it happened on, and
every new connection calls ``on_connect`` (a restarted server numbers its CAS from 1).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ratewarden.errors import StorageError
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_link import failure, reply_failure, tls_host
from ratewarden.storage._memcache_url import Address, shown

__all__ = ["AsyncLink"]


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
                    waiter.set_exception(reply_failure(self.name, reply))
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
        tls: dict[str, Any] = {}
        if self.tls is not None:
            tls = {
                "ssl": self.tls,
                "server_hostname": tls_host(address),
                "ssl_handshake_timeout": self.timeout,
            }
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can lose a cancellation
            # that lands as the connection is made (CPython gh-86296).
            async with asyncio.timeout(self.timeout):
                if isinstance(address, str):
                    made = loop.create_unix_connection(lambda: _Connection(name), address, **tls)
                else:
                    host, port = address
                    made = loop.create_connection(lambda: _Connection(name), host, port, **tls)
                _, conn = await made
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
