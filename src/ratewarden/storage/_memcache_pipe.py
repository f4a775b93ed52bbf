"""The asyncio memcache store's wire: one pipelined connection per server.

``AsyncLink`` keeps one connection per server (over TCP, TLS or a Unix socket) on the
running loop, opened on first use and after a failure, and writes the requests of one
turn of the loop together, the replies coming back in order. As ``BlockingLink``
(``_memcache_link``): every failure to reach a server, or to hear from it within the
timeout, is a ``StorageUnavailableError`` and drops the connection it happened on, and
every new connection calls ``on_connect`` (a restarted server numbers its CAS from 1).

A reply's time counts from its turn, as on the Redis pipe (``_redis_pipe``): ``timeout``
after its request was written, or after the bytes before it arrived, whichever is later
(memcached answers in order). Counting from when a call sent its request charged the
server with this process's own backlog: 4,000 calls started at once plan for ~0.1 s
before the loop writes or reads anything, so at the default 20 ms every request had
expired before it was even written. One timer per connection watches the oldest
unanswered request; before it judges, it lets the loop read what already waits in the
socket (those replies came in time). A connection that owes a reply and has received nothing
for ``timeout`` is dropped, failing every request on it.
"""

from __future__ import annotations

import asyncio
import select
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

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        self.parser = wire.Parser()
        self.waiters: deque[asyncio.Future[wire.Reply]] = deque()
        self.transport: asyncio.Transport | None = None
        self.outgoing: list[bytes] = []
        self.closed = False
        self.retired = False  # its server is no longer listed: closed once nothing waits
        # Requests written and replies read so far; per write (requests written up to and
        # including it, loop.time() of the write), oldest first.
        self.sent = 0
        self.answered = 0
        self.writes: deque[tuple[int, float]] = deque()
        self.heard_at = 0.0  # loop.time() of the last bytes received
        self.watchdog: asyncio.TimerHandle | None = None
        self.pending_input: Callable[[], Any] = list  # unread bytes (or EOF) in the socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()
        self.heard_at = self.loop.time()
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            self.pending_input = lambda: poller.poll(0)

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
            self.sent += len(self.outgoing)
            now = self.loop.time()
            self.writes.append((self.sent, now))
            if self.watchdog is None:
                self.watchdog = self.loop.call_at(now + self.timeout, self._expire)
        self.outgoing.clear()

    def _expire(self) -> None:
        """Drop the connection if the oldest unanswered request's turn has lasted ``timeout``."""
        self.watchdog = None
        if self.closed or self.sent <= self.answered:
            return  # nothing is owed; the next write arms the watchdog again
        now = self.loop.time()
        if self.pending_input():
            # The loop was busy and replies wait unread: not late. A timer due now runs
            # after the next turn's reads (asyncio runs I/O callbacks before timers).
            self.watchdog = self.loop.call_at(now, self._expire)
            return
        writes = self.writes
        while writes[0][0] <= self.answered:
            writes.popleft()
        # Its turn began when it was written, or when the bytes before it came (a long
        # reply arrives in pieces).
        due = max(writes[0][1], self.heard_at) + self.timeout
        if now < due:
            self.watchdog = self.loop.call_at(due, self._expire)
            return
        self.fail(failure(self.name, f"no reply within {self.timeout:g} s"))

    def data_received(self, data: bytes) -> None:
        self.heard_at = self.loop.time()
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
            self.answered += 1
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
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
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
        return await conn.send(request, asyncio.get_running_loop())

    async def _connect(self, address: Address) -> _Connection:
        opening = self._opening.get(address)
        if opening is not None:
            return await asyncio.shield(opening)
        loop = asyncio.get_running_loop()
        opening = self._opening[address] = loop.create_future()
        name = shown(address)
        timeout = self.timeout
        tls: dict[str, Any] = {}
        if self.tls is not None:
            tls = {
                "ssl": self.tls,
                "server_hostname": tls_host(address),
                "ssl_handshake_timeout": self.timeout,
            }
        try:
            # Connect from the next turn of the loop, as the Redis pipe does: calls started
            # together with this one plan in this turn, and that backlog, ~0.1 s for
            # 4,000, is this process's own, not the server's slowness to accept.
            await asyncio.sleep(0)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can lose a cancellation
            # that lands as the connection is made (CPython gh-86296).
            async with asyncio.timeout(self.timeout):
                if isinstance(address, str):
                    made = loop.create_unix_connection(
                        lambda: _Connection(name, timeout), address, **tls
                    )
                else:
                    host, port = address
                    made = loop.create_connection(
                        lambda: _Connection(name, timeout), host, port, **tls
                    )
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
