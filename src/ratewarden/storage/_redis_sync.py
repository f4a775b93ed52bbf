"""Where a synchronous Redis store sends a command: one server, or a Cluster slot's primary.

Routers raise raw redis-py / hiredis errors; the store turns them into ours at
its error boundary. Every request is bounded by the store's timeout.
"""

from __future__ import annotations

from typing import Any, Protocol

import hiredis
import redis
from redis import exceptions as rx
from redis.crc import key_slot

from ratewarden.storage import _redis_protocol as protocol
from ratewarden.storage._redis_clients import LazyCluster
from ratewarden.storage._redis_link import Link, LinkPool
from ratewarden.storage._redis_protocol import ConnectFailed, Recovery, Sendable, checked
from ratewarden.storage._scripts import Script

__all__ = ["Cluster", "Router", "Standalone", "run_script"]


def run_script(link: Link, script: Script, packed: bytes) -> Any:
    """Send the EVALSHA ``packed`` on ``link``; after NOSCRIPT send EVAL, after READONLY
    reconnect and resend."""
    reply = link.request(packed)
    if type(reply) is hiredis.ReplyError:
        reply = _recover(link, reply, script, packed)
    return reply


def _recover(link: Link, reply: hiredis.ReplyError, script: Script, packed: bytes) -> Any:
    evalsha = packed
    for _ in range(protocol.MAX_ATTEMPTS - 1):
        reconnect, packed = protocol.retry(reply, script, evalsha)
        if reconnect:
            link.close()
        reply = link.request(packed)
        if type(reply) is not hiredis.ReplyError:
            return reply
    raise reply


class Router(Protocol):
    """What the store asks of a router; errors come out raw, for the store to map."""

    where: str
    #: A Redis Cluster: one script's keys must hash to one slot.
    clustered: bool

    def eval(self, script: Script, route_key: str, packed: bytes) -> Any:
        """Run the EVALSHA ``packed`` of ``script`` on the server of ``route_key``.

        ``route_key`` is one of the script's keys, or any key with their hash tag.
        """
        ...

    def command(self, route_key: str, *parts: Sendable) -> Any: ...

    def node_of(self, route_key: str) -> str:
        """The name of the server ``route_key`` goes to; ``""`` on one server."""
        ...

    def ping(self) -> None: ...

    def close(self) -> None: ...


class Standalone:
    """One server: a plain Redis, or the primary a Sentinel names."""

    clustered = False

    def __init__(self, client: redis.Redis, timeout: float, spin: float) -> None:
        self._links = LinkPool.for_pool(client.connection_pool, timeout, spin)
        self.where = self._links.where

    def eval(self, script: Script, route_key: str, packed: bytes) -> Any:
        links = self._links
        link = links.take()
        try:
            return run_script(link, script, packed)
        finally:
            links.give(link)

    def command(self, route_key: str, *parts: Sendable) -> Any:
        links = self._links
        link = links.take()
        try:
            return checked(link.request(protocol.pack(parts)))
        finally:
            links.give(link)

    def node_of(self, route_key: str) -> str:
        return ""

    def ping(self) -> None:
        self.command("", "PING")

    def close(self) -> None:
        self._links.close()


class Cluster:
    """A Redis Cluster: each decision goes to the primary of its hash tag's slot.

    All keys of one decision share a hash tag, so the first key names the slot.
    The slot table is redis-py's (a ``LazyCluster`` reads it at the first call
    that needs it, where its errors are that call's). A MOVED / ASK / TRYAGAIN
    reply (nothing ran) is handed to the client's own command path, which
    follows the redirection and updates that table. When a primary cannot be
    reached (nothing was sent) the table is refreshed and the call tried once
    more if the slot moved. Errors after a command may have run are never
    retried here: a decision is not idempotent.
    """

    clustered = True

    def __init__(self, client: redis.RedisCluster, timeout: float, spin: float) -> None:
        cluster: Any = client  # redis-py's cluster API is untyped
        self._client = cluster
        self._timeout = timeout
        self._spin = spin
        self._pools: dict[str, LinkPool] = {}
        # A client from_url made connects at its first use: until then, the nodes it was given.
        self._lazy = cluster if isinstance(cluster, LazyCluster) else None
        made = self._lazy is None or self._lazy.made
        self.where = protocol.cluster_where(cluster.get_nodes() if made else cluster.startup_nodes)

    def _links(self, node: Any) -> LinkPool:
        links = self._pools.get(node.name)
        if links is None:
            pool = node.redis_connection.connection_pool
            links = self._pools.setdefault(
                node.name, LinkPool.for_pool(pool, self._timeout, self._spin)
            )
        return links

    def _node(self, route_key: str) -> Any:
        return self._client.nodes_manager.get_node_from_slot(key_slot(route_key.encode()))

    def node_of(self, route_key: str) -> str:
        if self._lazy is not None and not self._lazy.made:
            return ""  # no slot table yet, and asking must not connect: the call itself will
        try:
            name: str = self._node(route_key).name
        except rx.RedisClusterException:  # a slot with no primary in the table
            return ""
        return name

    def eval(self, script: Script, route_key: str, packed: bytes) -> Any:
        node = self._node(route_key)
        for _ in range(2):
            links = self._links(node)
            link = links.take()
            try:
                return run_script(link, script, packed)
            except ConnectFailed:
                node = self._moved_after_failure(node, route_key)
            except hiredis.ReplyError as reply:
                if protocol.recovery(reply) is not Recovery.REDIRECT:
                    raise
                return self._redirected_eval(script, packed)
            finally:
                links.give(link)
        raise ConnectFailed(f"cannot connect to the primary of {route_key!r}")

    def _moved_after_failure(self, node: Any, route_key: str) -> Any:
        """Refresh the slot table; return the slot's new primary, or re-raise if unchanged."""
        self._client.nodes_manager.initialize()
        return protocol.moved(node, self._node(route_key))

    def _redirected_eval(self, script: Script, packed: bytes) -> Any:
        evalsha, then_eval = protocol.redirection(script, packed)
        try:
            return self._client.execute_command(*evalsha)
        except rx.NoScriptError:
            return self._client.execute_command(*then_eval)

    def command(self, route_key: str, *parts: Sendable) -> Any:
        links = self._links(self._node(route_key))
        link = links.take()
        try:
            reply = link.request(protocol.pack(parts))
        finally:
            links.give(link)
        if type(reply) is hiredis.ReplyError and protocol.recovery(reply) is Recovery.REDIRECT:
            return self._client.execute_command(*parts)
        return checked(reply)

    def ping(self) -> None:
        for node in self._client.get_primaries():
            links = self._links(node)
            link = links.take()
            try:
                checked(link.request(protocol.PING))
            finally:
                links.give(link)

    def close(self) -> None:
        pools, self._pools = self._pools, {}
        for links in pools.values():
            links.close()
