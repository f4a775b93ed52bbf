"""A TCP proxy on loopback that can add latency, drop, reset or black-hole connections.

It runs its own asyncio loop in a daemon thread, so blocking tests (``RedisStore``)
and asyncio tests (``AsyncRedisStore``, the service) drive it the same way::

    proxy = FaultProxy(server.port)        # forwards 127.0.0.1:proxy.port -> server.port
    proxy.set_fault(Fault.BLACKHOLE)       # from now on nothing is forwarded
    proxy.set_fault(Fault.NONE)            # healthy again

Faults, as a store sees them:

- ``LATENCY``: every chunk of bytes waits ``latency`` seconds before it is
  forwarded, in both directions (a slow network or a slow Redis).
- ``DROP``: open connections are closed with a FIN; new ones are accepted and
  closed at once (a proxy or a Redis restarting).
- ``RESET``: open connections are aborted with an RST (``SO_LINGER`` 0); new ones
  are reset at once (a firewall or a crashed peer).
- ``BLACKHOLE``: connections stay open but nothing is forwarded either way; new
  ones are accepted and never answered (a partition, a hung Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

HOST = "127.0.0.1"
_CHUNK = 65536

T = TypeVar("T")


class Fault(enum.Enum):
    NONE = "none"
    LATENCY = "latency"
    DROP = "drop"
    RESET = "reset"
    BLACKHOLE = "blackhole"


class _Link:
    """One proxied connection: the client's side and Redis's side."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter | None) -> None:
        self.client = client
        self.upstream = upstream

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None and not writer.is_closing():
        # If the peer's close got there first, a plain abort will do.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forwards a loopback port to ``target_port`` until told to misbehave."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.fault = Fault.NONE
        self.latency = 0.0
        self.accepted = 0
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._handle, HOST, 0))
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def set_fault(self, fault: Fault, latency: float = 0.0) -> None:
        """Switch to ``fault``; DROP and RESET also cut every open connection now."""

        async def switch() -> None:
            self.fault, self.latency = fault, latency
            if fault in (Fault.DROP, Fault.RESET):
                for link in list(self._links):
                    self._cut(link, fault)

        self._call(switch())

    def close(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            for link in list(self._links):
                self._cut(link, Fault.RESET)
            for task in self._handlers:
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)

        self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- inside the proxy's loop

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(5)

    def _cut(self, link: _Link, fault: Fault) -> None:
        self._links.discard(link)
        for writer in link.writers():
            if fault is Fault.RESET:
                _abort(writer)
            else:
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        link = _Link(writer, None)
        fault = self.fault
        if fault in (Fault.DROP, Fault.RESET):
            self._cut(link, fault)
            return
        self._links.add(link)
        try:
            if fault is Fault.BLACKHOLE:
                await self._swallow(reader)
                return
            up_reader, link.upstream = await asyncio.open_connection(HOST, self.target_port)
            # Either side ending (or failing) ends the link; the finally cuts both.
            await asyncio.gather(
                self._pump(reader, link.upstream),
                self._pump(up_reader, writer),
                return_exceptions=True,
            )
        except OSError:
            pass
        finally:
            if link in self._links:
                self._cut(link, Fault.DROP)

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(_CHUNK):
            pass

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(_CHUNK):
            if self.fault is Fault.BLACKHOLE:
                continue
            if self.fault is Fault.LATENCY and self.latency > 0:
                await asyncio.sleep(self.latency)
            if sink.is_closing():
                return
            sink.write(data)
            await sink.drain()
        sink.close()
