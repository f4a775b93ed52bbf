"""Where a synchronous Redis store sends a command: one server, or a Cluster slot's primary.

Routers raise raw redis-py / hiredis errors; the store turns them into ours at
its error boundary. Every request is bounded by the store's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import hiredis
import redis
from redis import exceptions as rx
from redis.crc import key_slot

from ratewarden.storage import _redis_protocol as protocol
from ratewarden.storage._redis_clients import LazyCluster
from ratewarden.storage._redis_errors import REDIS_ERRORS, wrong_reply
from ratewarden.storage._redis_link import Link, LinkPool
from ratewarden.storage._redis_protocol import ConnectFailed, Recovery, Sendable, checked
from ratewarden.storage._redis_sentinel import start_thread, watch_for
from ratewarden.storage._redis_server import ServerUnusable
from ratewarden.storage._scripts import Script

__all__ = ["Cluster", "Request", "Router", "Standalone", "run_script", "run_scripts"]

#: One script call: the script, a key routed like its keys, and its packed EVALSHA.
Request = tuple[Script, str, bytes]


def run_script(link: Link, script: Script, packed: bytes) -> Any:
    """Send the EVALSHA ``packed`` on ``link``; after NOSCRIPT send EVAL, after READONLY
    reconnect and resend. The reply is a list (every script answers one): any other is an
    error reply raised, or ``ServerUnusable`` (``_redis_errors.wrong_reply``)."""
    reply = link.request(packed)
    if type(reply) is not list:  # one test on the way of every reply: list, error, or wrong
        reply = _recover(link, reply, script, packed)
    return reply


def _recover(link: Link, reply: Any, script: Script, packed: bytes) -> list[Any]:
    evalsha = packed
    for _ in range(protocol.MAX_ATTEMPTS - 1):
        if type(reply) is not hiredis.ReplyError:
            raise ServerUnusable(wrong_reply(link.where, reply, "not a list"))
        reconnect, packed = protocol.retry(reply, script, evalsha)
        if reconnect:
            link.close()
        reply = link.request(packed)
        if type(reply) is list:
            return reply
    if type(reply) is not hiredis.ReplyError:
        raise ServerUnusable(wrong_reply(link.where, reply, "not a list"))
    raise reply


def run_scripts(link: Link, requests: Sequence[Request]) -> list[Any]:
    """``run_script`` of every request, pipelined: each script still atomic on its own, the
    replies in order, an error reply left in its request's place (as a value)."""
    link.send(b"".join([packed for _, _, packed in requests]))
    return _recover_all(link, requests, link.receive(len(requests)))


def _recover_all(link: Link, requests: Sequence[Request], replies: list[Any]) -> list[Any]:
    """``replies`` with the requests that NOSCRIPT or READONLY stopped (nothing ran) sent
    again, together, as ``_recover`` sends one: an EVAL after NOSCRIPT (but for a script
    whose EVAL goes out before it in the same write, on the first retry, as the asyncio
    pipe does), a new connection after READONLY; at most ``MAX_ATTEMPTS`` each."""
    for attempt in range(protocol.MAX_ATTEMPTS - 1):
        again = [i for i, reply in enumerate(replies) if _recoverable(reply)]
        if not again:
            break
        loading = _loading() if attempt == 0 else None
        reconnect, resend = False, []
        for i in again:
            script, _, evalsha = requests[i]
            closing, packed = protocol.retry(replies[i], script, evalsha, loading)
            reconnect = reconnect or closing
            resend.append(packed)
        if reconnect:
            link.close()
        link.send(b"".join(resend))
        for i, reply in zip(again, link.receive(len(again)), strict=True):
            replies[i] = reply
    return replies


def _loading() -> Callable[[str], bool]:
    """``Pipe.loading`` for one write: whether an EVAL of the script goes out before."""
    evals: set[str] = set()

    def loading(sha: str) -> bool:
        if sha in evals:
            return True
        evals.add(sha)
        return False

    return loading


def _recoverable(reply: Any) -> bool:
    if type(reply) is not hiredis.ReplyError:
        return False
    return protocol.recovery(reply) in (Recovery.LOAD, Recovery.RECONNECT)


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

    def eval_all(self, requests: Sequence[Request]) -> list[Any]:
        """``eval`` of each request, pipelined: every reply, or the error standing for it
        (a value: an error reply, or on a Cluster the error of a primary that failed).
        Raises when the one server fails (no reply in time, a lost connection)."""
        ...

    def command(self, route_key: str, *parts: Sendable) -> Any: ...

    def node_of(self, route_key: str) -> str:
        """The name of the server ``route_key`` goes to; ``""`` on one server."""
        ...

    def ping(self) -> None: ...

    def close(self) -> None: ...


class Standalone:
    """One server: a plain Redis, or the primary a Sentinel names (read again while the
    store is used, ``_redis_sentinel``: a switch makes every link connect again)."""

    clustered = False

    def __init__(self, client: redis.Redis, timeout: float, spin: float) -> None:
        self._links = LinkPool.for_pool(client.connection_pool, timeout, spin)
        self.where = self._links.where
        self._watch = watch_for(client, self._links.retire)

    def _read_again(self) -> None:
        """Start a reading of the Sentinels when one is due (one at a time, off this call)."""
        watch = self._watch
        if watch is not None and watch[0].due():
            start_thread(*watch)

    def eval(self, script: Script, route_key: str, packed: bytes) -> Any:
        if self._watch is not None:
            self._read_again()
        links = self._links
        link = links.take()
        try:
            return run_script(link, script, packed)
        finally:
            links.give(link)

    def eval_all(self, requests: Sequence[Request]) -> list[Any]:
        if self._watch is not None:
            self._read_again()
        links = self._links
        link = links.take()
        try:
            return run_scripts(link, requests)
        finally:
            links.give(link)

    def command(self, route_key: str, *parts: Sendable) -> Any:
        if self._watch is not None:
            self._read_again()
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

    def eval_all(self, requests: Sequence[Request]) -> list[Any]:
        """One pipeline per primary, each written before any reply is read. A primary that
        cannot be reached (nothing sent) is looked up again once, as ``eval`` does; one
        that fails answers its requests with its error; a redirected request follows its
        redirection on its own."""
        replies: list[Any] = [None] * len(requests)
        failed = self._pipelines(requests, range(len(requests)), replies)
        if failed:
            for i, _ in self._pipelines(requests, self._moved(requests, failed, replies), replies):
                replies[i] = ConnectFailed(f"cannot connect to the primary of {requests[i][1]!r}")
        for i, reply in enumerate(replies):
            if type(reply) is hiredis.ReplyError and protocol.recovery(reply) is Recovery.REDIRECT:
                try:
                    replies[i] = self._redirected_eval(requests[i][0], requests[i][2])
                except REDIS_ERRORS as exc:
                    replies[i] = exc
        return replies

    def _pipelines(
        self, requests: Sequence[Request], places: Sequence[int], replies: list[Any]
    ) -> list[tuple[int, Any]]:
        """The requests at ``places`` sent, grouped by primary, and their replies (or their
        primary's error) put in ``replies``; the places (and nodes) that could not connect."""
        groups: dict[str, tuple[Any, list[int]]] = {}
        manager = self._client.nodes_manager  # before a lazy client is made: the whole call's
        for i in places:
            try:
                node = manager.get_node_from_slot(key_slot(requests[i][1].encode()))
            except rx.RedisClusterException as exc:  # a slot with no primary in the table
                replies[i] = exc
                continue
            groups.setdefault(node.name, (node, []))[1].append(i)
        sent: list[tuple[LinkPool, Link, list[int]]] = []
        failed: list[tuple[int, Any]] = []
        received = 0
        try:
            for node, group in groups.values():
                links = self._links(node)
                link = links.take()
                try:
                    link.send(b"".join([requests[i][2] for i in group]))
                    sent.append((links, link, group))
                    continue
                except ConnectFailed:
                    failed += [(i, node) for i in group]
                except REDIS_ERRORS as exc:
                    for i in group:
                        replies[i] = exc
                links.give(link)
            for links, link, group in sent:
                try:
                    got = _recover_all(link, [requests[i] for i in group], link.receive(len(group)))
                except REDIS_ERRORS as exc:
                    got = [exc] * len(group)
                finally:
                    received += 1
                    links.give(link)
                for i, reply in zip(group, got, strict=True):
                    replies[i] = reply
        except BaseException:
            for _, unread, _ in sent[received:]:
                unread.close()  # their replies would answer the links' next requests
            raise
        return failed

    def _moved(
        self, requests: Sequence[Request], failed: list[tuple[int, Any]], replies: list[Any]
    ) -> list[int]:
        """The slot table read again: the places in ``failed`` whose slot has another primary
        now; the others are answered with why not (still the primary that failed)."""
        try:
            self._client.nodes_manager.initialize()
        except REDIS_ERRORS as exc:
            for i, _ in failed:
                replies[i] = exc
            return []
        moved = []
        for i, node in failed:
            try:
                protocol.moved(node, self._node(requests[i][1]))
            except REDIS_ERRORS as exc:
                replies[i] = exc
            else:
                moved.append(i)
        return moved

    def _moved_after_failure(self, node: Any, route_key: str) -> Any:
        """Refresh the slot table; return the slot's new primary, or re-raise if unchanged."""
        self._client.nodes_manager.initialize()
        return protocol.moved(node, self._node(route_key))

    def _redirected_eval(self, script: Script, packed: bytes) -> Any:
        evalsha, then_eval = protocol.redirection(script, packed)
        try:
            reply = self._client.execute_command(*evalsha)
        except rx.NoScriptError:
            reply = self._client.execute_command(*then_eval)
        if type(reply) is not list:
            raise ServerUnusable(wrong_reply(self.where, reply, "not a list"))
        return reply

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
