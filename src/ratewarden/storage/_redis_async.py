"""Where an asyncio Redis store sends a command: one server, or a Cluster slot's primary.

The async twin of ``_redis_sync``: the same routing and recovery, over one
auto-pipelined connection per server (``_redis_pipe.Pipe``) instead of a pool
of blocking links. Connections belong to the event loop that made them; a
store used from a new loop makes new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import hiredis
import redis.asyncio as aredis
from redis import exceptions as rx
from redis.crc import key_slot

from ratewarden.storage import _redis_protocol as protocol
from ratewarden.storage._redis_errors import REDIS_ERRORS, wrong_reply
from ratewarden.storage._redis_link import connection_kwargs, describe
from ratewarden.storage._redis_pipe import Pipe
from ratewarden.storage._redis_protocol import (
    ConnectFailed,
    ConnectionFactory,
    Recovery,
    Sendable,
    checked,
)
from ratewarden.storage._redis_sentinel import watch_for
from ratewarden.storage._redis_server import ServerUnusable
from ratewarden.storage._scripts import Script

__all__ = ["AsyncCluster", "AsyncRouter", "AsyncStandalone", "run_script"]


async def run_script(pipe: Pipe, script: Script, packed: bytes) -> Any:
    """See ``_redis_sync.run_script``; the same steps, awaited."""
    reply = await pipe.request(packed)
    if type(reply) is not list:
        reply = await _recover(pipe, reply, script, packed)
    return reply


async def _recover(pipe: Pipe, reply: Any, script: Script, packed: bytes) -> list[Any]:
    """See ``_redis_sync._recover``."""
    evalsha = packed
    for attempt in range(protocol.MAX_ATTEMPTS - 1):
        if type(reply) is not hiredis.ReplyError:
            raise ServerUnusable(wrong_reply(pipe.where, reply, "not a list"))
        # Redis runs one connection's requests in order, so an EVALSHA written after
        # another waiter's EVAL of the script finds it loaded: a burst of NOSCRIPTs
        # sends the source (7 KB) once, not once per waiter (28 MB for 4,000 waiters,
        # which kept Redis busy past the timeout). A second NOSCRIPT sends the EVAL.
        loading = pipe.loading if attempt == 0 else None
        reconnect, packed = protocol.retry(reply, script, evalsha, loading)
        if reconnect:
            pipe.reconnect()
        reply = await pipe.request(packed)
        if type(reply) is list:
            return reply
    if type(reply) is not hiredis.ReplyError:
        raise ServerUnusable(wrong_reply(pipe.where, reply, "not a list"))
    raise reply


def _factory(
    connection_class: Any, kwargs: dict[str, Any], timeout: float
) -> tuple[ConnectionFactory, str]:
    options = connection_kwargs(kwargs, timeout)
    return (lambda: connection_class(**options)), describe(options)


class AsyncRouter(Protocol):
    """See ``_redis_sync.Router``."""

    where: str
    clustered: bool

    async def eval(self, script: Script, route_key: str, packed: bytes) -> Any: ...

    async def command(self, route_key: str, *parts: Sendable) -> Any: ...

    def node_of(self, route_key: str) -> str: ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...


class _Pipes:
    """One pipe per server name, for the running event loop."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pipes: dict[str, Pipe] = {}
        self._draining: set[asyncio.Task[None]] = set()

    def get(self, name: str, make: Callable[[], tuple[ConnectionFactory, str]]) -> Pipe:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Another loop's transports cannot be used (or closed) from here.
            self._loop, self._pipes = loop, {}
        pipe = self._pipes.get(name)
        if pipe is None:
            factory, where = make()
            pipe = self._pipes[name] = Pipe(factory, where, self._timeout, loop)
        return pipe

    def retire(self, name: str) -> None:
        """Send the next requests for ``name`` on a new connection; close the old one once
        it has answered what it was sent (Redis answers in order: after a PING's reply)."""
        pipe = self._pipes.pop(name, None)
        if pipe is not None:
            task = asyncio.get_running_loop().create_task(_drain(pipe))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)

    async def aclose(self) -> None:
        pipes, self._pipes = self._pipes, {}
        if self._loop is asyncio.get_running_loop():
            for pipe in pipes.values():
                await pipe.aclose()
            await _settle(self._draining)


async def _settle(tasks: set[asyncio.Task[None]]) -> None:
    """Wait for those of ``tasks`` on the running loop (another loop's cannot be awaited)."""
    loop = asyncio.get_running_loop()
    await asyncio.gather(*[t for t in tasks if t.get_loop() is loop], return_exceptions=True)


async def _drain(pipe: Pipe) -> None:
    """Close ``pipe`` once every request sent on it has its reply. A request still being
    recovered (``_recover``: EVAL after NOSCRIPT, a resend after READONLY) sends its next
    attempt when its reply comes, before the PING after it is sent: one PING per attempt."""
    try:
        for _ in range(protocol.MAX_ATTEMPTS):
            # A connection that failed has given its requests their errors already.
            with contextlib.suppress(*REDIS_ERRORS):
                await pipe.request(protocol.PING)
    finally:
        await pipe.aclose()


class AsyncStandalone:
    """One server: a plain Redis, or the primary a Sentinel names."""

    clustered = False

    def __init__(self, client: aredis.Redis, timeout: float) -> None:
        self._pool = client.connection_pool
        self._timeout = timeout
        self.where = self._make()[1]
        self._pipes = _Pipes(timeout)
        # A Sentinel's primary is read again while the store is used (``_redis_sentinel``).
        self._watch = watch_for(client, lambda: self._pipes.retire(""))
        self._reading: set[asyncio.Task[None]] = set()

    def _pipe(self) -> Pipe:
        if self._watch is not None:
            self._read_again()
        return self._pipes.get("", self._make)

    def _read_again(self) -> None:
        """Start a reading of the Sentinels when one is due (one at a time, off this call)."""
        watch = self._watch
        if watch is not None and watch[0].due():
            task = asyncio.get_running_loop().create_task(watch[0].aread_now(watch[1]))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)

    def _make(self) -> tuple[ConnectionFactory, str]:
        pool = self._pool
        return _factory(pool.connection_class, pool.connection_kwargs, self._timeout)

    async def eval(self, script: Script, route_key: str, packed: bytes) -> Any:
        # run_script, inlined: one coroutine less on every decision.
        if self._watch is not None:
            self._read_again()
        pipe = self._pipes.get("", self._make)
        reply = await pipe.request(packed)
        if type(reply) is not list:
            reply = await _recover(pipe, reply, script, packed)
        return reply

    async def command(self, route_key: str, *parts: Sendable) -> Any:
        return checked(await self._pipe().request(protocol.pack(parts)))

    def node_of(self, route_key: str) -> str:
        return ""

    async def ping(self) -> None:
        checked(await self._pipe().request(protocol.PING))

    async def aclose(self) -> None:
        for task in self._reading:
            task.cancel()
        await _settle(self._reading)
        await self._pipes.aclose()


class AsyncCluster:
    """See ``_redis_sync.Cluster``: the same routing, over one pipe per primary."""

    clustered = True

    def __init__(self, client: aredis.RedisCluster, timeout: float) -> None:
        cluster: Any = client  # redis-py's cluster API is untyped
        self._client = cluster
        self._timeout = timeout
        self._pipes = _Pipes(timeout)
        self.where = protocol.cluster_where(cluster.startup_nodes)

    def _pipe(self, node: Any) -> Pipe:
        timeout = self._timeout
        return self._pipes.get(
            node.name, lambda: _factory(node.connection_class, node.connection_kwargs, timeout)
        )

    async def _node(self, route_key: str) -> Any:
        client = self._client
        if client._initialize:
            await client.initialize()
        return client.nodes_manager.get_node_from_slot(key_slot(route_key.encode()))

    def node_of(self, route_key: str) -> str:
        client = self._client
        if client._initialize:  # no slot table before the first call: one circuit till then
            return ""
        try:
            name: str = client.nodes_manager.get_node_from_slot(key_slot(route_key.encode())).name
        except rx.RedisClusterException:  # a slot with no primary in the table
            return ""
        return name

    async def eval(self, script: Script, route_key: str, packed: bytes) -> Any:
        node = await self._node(route_key)
        for _ in range(2):
            try:
                return await run_script(self._pipe(node), script, packed)
            except ConnectFailed:
                node = await self._moved_after_failure(node, route_key)
            except hiredis.ReplyError as reply:
                if protocol.recovery(reply) is not Recovery.REDIRECT:
                    raise
                return await self._redirected_eval(script, packed)
        raise ConnectFailed(f"cannot connect to the primary of {route_key!r}")

    async def _moved_after_failure(self, node: Any, route_key: str) -> Any:
        await self._client.nodes_manager.initialize()
        return protocol.moved(node, await self._node(route_key))

    async def _redirected_eval(self, script: Script, packed: bytes) -> Any:
        evalsha, then_eval = protocol.redirection(script, packed)
        try:
            reply = await self._client.execute_command(*evalsha)
        except rx.NoScriptError:
            reply = await self._client.execute_command(*then_eval)
        if type(reply) is not list:
            raise ServerUnusable(wrong_reply(self.where, reply, "not a list"))
        return reply

    async def command(self, route_key: str, *parts: Sendable) -> Any:
        reply = await self._pipe(await self._node(route_key)).request(protocol.pack(parts))
        if type(reply) is hiredis.ReplyError and protocol.recovery(reply) is Recovery.REDIRECT:
            return await self._client.execute_command(*parts)
        return checked(reply)

    async def ping(self) -> None:
        client = self._client
        if client._initialize:
            await client.initialize()
        for node in client.get_primaries():
            checked(await self._pipe(node).request(protocol.PING))

    async def aclose(self) -> None:
        await self._pipes.aclose()
