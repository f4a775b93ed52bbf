"""Auto-pipelining over one asyncio connection that redis-py sets up.

Requests made during one turn of the event loop are written together at the
end of that turn, and replies are matched back to the waiting futures in order
as they arrive (Redis answers in order). Many decisions in flight then cost one
system call per batch instead of one round trip each. A batch is also written
as soon as it holds ``BATCH`` requests: when many waiters wake in one turn, the
server starts on the first ones while this process still plans the rest, so
client and server work overlap instead of taking turns.

redis-py makes the connection (TCP, Unix socket or TLS, AUTH, SELECT, Sentinel
asking for the primary); then the transport's protocol is swapped for this one,
so replies are parsed by hiredis straight from ``data_received``.

Each request's deadline runs from its reply's turn: ``timeout`` after it was
written, or after the reply before it arrived, whichever is later (Redis answers
in order, so no reply can come before the one ahead of it). Counting from when a
request was made instead charged Redis with this process's own backlog: packing
4,000 requests in one loop turn took the loop ~30-90 ms, during which no reply
could be read, so at the default 20 ms every request had expired before its
reply, already waiting in the socket, was looked at. A request whose turn has
lasted ``timeout`` with no byte from the server means the server, or the path
to it, is stuck: the connection is dropped (every request on it fails) and the
next request makes a fresh one. A silent server is so found within ``timeout``
of the first reply it owes. Before it judges, the watchdog lets the loop read
whatever already waits in the socket: those replies came in time.

One timer per pipe watches the oldest unanswered request: a per-request timer
would cost more than the rest of the request. Requests waiting for the
connection are bounded by the connect itself (redis-py's connect and handshake
use the same timeout).
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from collections.abc import Callable
from typing import Any

import hiredis
from redis import exceptions as rx

from ratewarden.storage._redis_errors import REDIS_ERRORS, connect_failure, gave_password, refusal
from ratewarden.storage._redis_protocol import ConnectFailed, ConnectionFactory
from ratewarden.storage._redis_server import HELLO, ServerUnusable, check_hello

__all__ = ["BATCH", "Pipe"]

#: Requests per write at most. On loopback with 64 in flight and the server on
#: another CPU, caps of 8 to 32 did alike and ~40% better than one write per turn
#: (client and server take turns then); with both on one CPU the cap costs ~25%.
#: ``ratewarden serve`` with 16 calls in flight (3 descriptors, native transport, three
#: alternations on 2 CPUs) did 8,976-10,584 calls/s at 8 against 7,434-8,566 at 16: a
#: batch of 16 calls is then one write, and Redis waits for the loop to plan all of it.
BATCH = 8


async def _hello(conn: Any, where: str) -> None:
    """``_redis_link._hello`` on an asyncio connection, before the pipe takes its stream."""
    await conn.send_command(*HELLO)
    try:
        reply = await conn.read_response()
    except rx.ResponseError:
        return
    check_hello(reply, where)


class Pipe(asyncio.Protocol):
    """Requests to one server, pipelined, on the event loop ``loop``."""

    def __init__(
        self,
        make: ConnectionFactory,
        where: str,
        timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._make = make
        self.where = where
        self._timeout = timeout
        self._loop = loop
        self._conn: Any = None
        self._transport: asyncio.Transport | None = None
        self._inner: asyncio.BaseProtocol | None = None
        self._reader = hiredis.Reader()
        # Futures of requests written (or about to be), in order: replies pop from the left.
        self._inflight: deque[asyncio.Future[Any]] = deque()
        self._outgoing: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        # Requests waiting for the connection to be made.
        self._queued: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._connecting: asyncio.Task[None] | None = None
        # Requests written on this connection, and per write (requests written up to and
        # including it, loop.time() of the write), oldest first: when each request went out.
        self._sent = 0
        self._writes: deque[tuple[int, float]] = deque()
        self._watchdog: asyncio.TimerHandle | None = None
        # SHA1s of the scripts an EVAL was sent for on this connection (see ``loading``).
        self._loads: set[str] = set()
        # loop.time() of the last bytes received (or of connecting).
        self._heard_at = 0.0
        # Whether the idle socket has bytes (or EOF) the loop has not read yet.
        self._pending_input: Callable[[], Any] = list
        self._closing: set[asyncio.Task[None]] = set()
        # redis-py builds an SSL context per connection object; building one loads the
        # system CA store (~70 ms of CPU on the loop). Every reconnect reuses the first.
        self._ssl_context: Any = None

    def request(self, packed: bytes) -> asyncio.Future[Any]:
        """Send one packed command; await the result for its reply (error replies as values)."""
        loop = self._loop
        fut: asyncio.Future[Any] = loop.create_future()
        if self._transport is not None and not self._inflight and self._pending_input():
            # Idle, yet something arrived: the server closed the connection (a
            # restart, an idle timeout) and the loop has not noticed yet. Sending
            # now would fail this request; connect afresh instead.
            self._abort(rx.ConnectionError(f"{self.where} closed the idle connection"))
        if self._transport is not None:
            self._inflight.append(fut)
            outgoing = self._outgoing
            outgoing.append(packed)
            if len(outgoing) >= BATCH:
                self._write()
            elif self._flush_handle is None:
                self._flush_handle = loop.call_soon(self._flush)
        else:
            self._queued.append((packed, fut))
            if self._connecting is None:
                self._connecting = loop.create_task(self._connect())
        return fut

    def loading(self, sha: str) -> bool:
        """Whether an EVAL of script ``sha`` went out on this connection; if not, the caller's will.

        The caller must then send its request before it awaits anything, so that it
        follows that EVAL (True) or is that EVAL (False) on the same connection.
        """
        if sha in self._loads:
            return True
        self._loads.add(sha)
        return False

    def reconnect(self) -> None:
        """Drop the connection (requests on it fail); the next request makes a new one."""
        self._abort(rx.ConnectionError(f"{self.where} stopped being the primary"))

    def _flush(self) -> None:
        """End of the loop turn: write what the turn queued."""
        self._flush_handle = None
        self._write()

    def _write(self) -> None:
        transport, outgoing = self._transport, self._outgoing
        if transport is not None and outgoing:
            self._outgoing = []
            transport.write(b"".join(outgoing))
            self._sent += len(outgoing)
            now = self._loop.time()
            self._writes.append((self._sent, now))
            if self._watchdog is None:
                self._watchdog = self._loop.call_at(now + self._timeout, self._expire)

    def _expire(self) -> None:
        """Drop the connection if the oldest unanswered request's turn has lasted ``timeout``."""
        self._watchdog = None
        loop = self._loop
        # Written and not answered yet (``_inflight`` also holds what is still to be written).
        owed = len(self._inflight) - len(self._outgoing)
        if self._transport is None or owed <= 0:
            return  # nothing is owed; the next write arms the watchdog again
        now = loop.time()
        if self._pending_input():
            # Bytes wait in the socket: the loop was busy, and replies that arrived are
            # not late. A timer due now runs after the next turn's reads (asyncio runs
            # I/O callbacks before timers), so the verdict waits for them.
            self._watchdog = loop.call_at(now, self._expire)
            return
        writes = self._writes
        answered = self._sent - owed
        while writes[0][0] <= answered:
            writes.popleft()
        # The oldest unanswered request's turn began when it was written, or when the
        # reply before it came (any byte counts: a long reply arrives in pieces).
        due = max(writes[0][1], self._heard_at) + self._timeout
        if now < due:
            self._watchdog = loop.call_at(due, self._expire)
            return
        self._abort(
            rx.TimeoutError(
                f"{self.where} sent nothing for {self._timeout:g} s while a reply was due"
            )
        )

    async def _connect(self) -> None:
        conn: Any = self._make()
        if hasattr(conn, "ssl_context"):
            if self._ssl_context is None:
                self._ssl_context = conn.ssl_context
            conn.ssl_context = self._ssl_context
        try:
            await conn.connect()
            writer = conn._writer  # private, but stable since redis-py 4.2
            if writer is None:
                raise rx.ConnectionError(f"{self.where}: connected without a stream")
            await _hello(conn, self.where)
        except ServerUnusable as exc:
            await conn.disconnect(nowait=True)
            self._fail_queued(exc)
            return
        except REDIS_ERRORS as exc:
            await conn.disconnect(nowait=True)
            failed: Exception | None = refusal(exc, self.where, password_given=gave_password(conn))
            if failed is None:
                failed = ConnectFailed(connect_failure(self.where, exc))
            failed.__cause__ = exc
            self._fail_queued(failed)
            return
        except BaseException:
            await conn.disconnect(nowait=True)
            self._fail_queued(rx.ConnectionError(f"connecting to {self.where} was cancelled"))
            raise
        finally:
            self._connecting = None
        transport = writer.transport
        self._inner = transport.get_protocol()
        transport.set_protocol(self)
        self._conn = conn
        self._transport = transport
        self._reader = hiredis.Reader()
        self._heard_at = self._loop.time()
        self._sent = 0
        self._writes.clear()
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            self._pending_input = lambda: poller.poll(0)
        queued, self._queued = self._queued, []
        for packed, fut in queued:
            if not fut.done():
                self._inflight.append(fut)
                self._outgoing.append(packed)
        self._write()

    def _fail_queued(self, exc: Exception) -> None:
        queued, self._queued = self._queued, []
        self._loads.clear()
        for _, fut in queued:
            if not fut.done():
                # One instance per waiter: each raise writes its own traceback.
                fut.set_exception(type(exc)(*exc.args))

    # asyncio.Protocol callbacks -------------------------------------------------

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        inflight = self._inflight
        self._heard_at = self._loop.time()
        try:
            reader.feed(data)
            reply = reader.gets()
            while reply is not False:
                fut = inflight.popleft()
                if not fut.done():
                    fut.set_result(reply)
                reply = reader.gets()
        except (hiredis.ProtocolError, IndexError) as exc:
            self._abort(rx.ConnectionError(f"{self.where} sent an unreadable reply: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop(rx.ConnectionError(f"{self.where} closed the connection"))
        if self._inner is not None:
            # Lets redis-py's stream finish closing (its disconnect waits for it).
            self._inner.connection_lost(exc)
            self._inner = None

    # ---------------------------------------------------------------------------

    def _abort(self, exc: Exception) -> None:
        transport = self._transport
        self._drop(exc)
        if transport is not None:
            transport.abort()

    def _drop(self, exc: Exception) -> None:
        """Forget the connection; fail every request that was sent on it."""
        conn = self._conn
        self._transport = None
        self._conn = None
        self._pending_input = list
        self._outgoing = []
        self._sent = 0
        self._writes.clear()
        self._loads.clear()
        inflight, self._inflight = self._inflight, deque()
        for fut in inflight:
            if not fut.done():
                fut.set_exception(type(exc)(*exc.args))
        if conn is not None:
            # The transport is closed already; this settles redis-py's bookkeeping.
            task = self._loop.create_task(conn.disconnect(nowait=True))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close the connection now; requests still waiting fail."""
        closed = rx.ConnectionError(f"the store closed its connection to {self.where}")
        connecting = self._connecting
        if connecting is not None:
            connecting.cancel()
            await asyncio.gather(connecting, return_exceptions=True)
        self._fail_queued(closed)
        self._abort(closed)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
