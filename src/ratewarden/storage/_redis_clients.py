"""Build the redis-py client a store URL describes, sync or asyncio.

Clients get the store's timeout as their socket and connect timeouts (a
``socket_timeout`` given is refused: ``_redis_url.check_options``). Cluster clients do
not retry on their own: a decision is not idempotent, and the store retries
only what provably did not run.

No client connects here, so an unreachable server fails the store's first
call, not its construction. redis-py's blocking ``RedisCluster`` reads the slot
table in its constructor: a URL's is a ``LazyCluster``, that client with its
constructor run at first use. Settings are checked here all the same (the TLS files
and contexts: ``_redis_tls``).
"""

from __future__ import annotations

import inspect
import os
import threading
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aredis
from redis import exceptions as rx
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import KWARGS_DISABLED_KEYS, REDIS_ALLOWED_KEYS, ClusterNode
from redis.connection import SSLConnection
from redis.retry import Retry
from redis.sentinel import SentinelManagedSSLConnection

from ratewarden.errors import ConfigurationError
from ratewarden.storage._redis_sentinel import AsyncTellingSentinel, TellingSentinel
from ratewarden.storage._redis_tls import (
    async_cluster_context,
    async_context,
    check_tls_files,
    one_context,
    one_context_option,
)
from ratewarden.storage._redis_url import (
    Target,
    check_options,
    client_options,
    parse,
    redact,
    tls_query,
)

__all__ = ["LazyCluster", "async_client", "sync_client"]


def _sentinel_options(target: Target, timeout: float, options: dict[str, Any]) -> dict[str, Any]:
    """The sentinels' connection options: the store's timeout, the URL's sentinel user and
    password, and over TLS the TLS options the primary gets too (its CA, client
    certificate, hostname check), since internal Sentinels use the same private CA."""
    found: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if target.tls:
        found["ssl"] = True
        found.update((name, value) for name, value in options.items() if name.startswith("ssl_"))
    for name, value in target.query:
        if name.startswith("sentinel_"):
            found[name.removeprefix("sentinel_")] = value
    return found


def _node_options(target: Target, timeout: float, options: dict[str, Any]) -> dict[str, Any]:
    merged = client_options(timeout, options)
    if target.username is not None:
        merged.setdefault("username", target.username)
    if target.password is not None:
        merged.setdefault("password", target.password)
    if target.tls:
        merged.setdefault("ssl", True)
    return merged


def _bad_option(target: Target, exc: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"store URL {redact(target.url)!r}: redis-py rejected an option ({exc}); check the "
        "URL's query and the keyword options passed to from_url. The store's own settings "
        "are not client options: in Python, from_url's timeout= and prefix=; under "
        "ratewarden serve, --store-timeout and --key-prefix"
    )


def _check_connection_options(target: Target, pool: Any) -> None:
    # redis-py makes connections lazily: try one now (no I/O) to catch bad options early.
    try:
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError, rx.RedisError) as exc:  # nothing was sent: the options
        raise _bad_option(target, exc) from exc


#: What the blocking Cluster client takes: its own arguments (but the nodes, which the URL
#: gives) and the options it hands its nodes' connections; it drops any other silently.
_CLUSTER_OPTIONS = (
    frozenset(inspect.signature(redis.RedisCluster.__init__).parameters) | set(REDIS_ALLOWED_KEYS)
) - {"self", "kwargs", "startup_nodes"}
#: Node options a Cluster refuses (redis-py says so only while it is made).
_NOT_ON_A_CLUSTER = {
    "db": "a Cluster has database 0 only",
    "unix_socket_path": "a Cluster is reached over TCP, not a Unix socket",
}


def _check_cluster_options(target: Target, options: dict[str, Any]) -> None:
    """Refuse now what the blocking Cluster client would find only once it is made, at the
    store's first call: an option it does not take, one a Cluster refuses, and connection
    options a node's connection refuses (one is made as the client makes them, unconnected)."""
    unknown = sorted(set(options) - _CLUSTER_OPTIONS)
    if unknown:
        named = ", ".join(repr(name) for name in unknown)
        raise _bad_option(target, TypeError(f"RedisCluster takes no option {named}"))
    for name, why in _NOT_ON_A_CLUSTER.items():
        if name in options:
            raise _bad_option(target, ValueError(f"{name}={options[name]!r}: {why}"))
    node = {  # what the client hands each node's connection pool
        name: value
        for name, value in options.items()
        if name in REDIS_ALLOWED_KEYS and name not in KWARGS_DISABLED_KEYS
    }
    if "connection_pool" in node:  # the caller's own pool, with its own options
        return
    if node.pop("ssl", False):
        node.setdefault("connection_class", SSLConnection)
    host, port = target.hosts[0]
    try:
        pool = redis.ConnectionPool(host=host, port=port, **node)
        if not issubclass(pool.connection_class, SSLConnection):  # as redis-py drops them
            for name in [name for name in pool.connection_kwargs if name.startswith("ssl_")]:
                del pool.connection_kwargs[name]
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError, rx.RedisError) as exc:  # nothing was sent: the options
        raise _bad_option(target, exc) from exc


class LazyCluster(redis.RedisCluster):
    """A blocking ``redis.RedisCluster`` whose constructor runs at its first use.

    redis-py's constructor reads the slot table, so made by ``from_url`` it would
    make an unreachable Cluster fail the store's construction: an app that builds
    its limiter at import could not start during an outage, and no failure mode
    could apply. This object connects nowhere when made (its settings were
    checked first); the first thing a call needs that only the constructor sets
    (``nodes_manager``, for any command) runs it on this same object, under a
    lock, so two threads never make two clients. A failed attempt raises
    redis-py's error to its call, and to the calls that waited for it (they do
    not try again at once: a queue of calls waits for one attempt, not one
    each); the next call tries again. ``close`` on a client never made connects
    nowhere. Until it is made, ``startup_nodes`` are the URL's.
    """

    def __init__(self, target: Target, options: dict[str, Any]) -> None:
        # Not redis-py's constructor: that runs in _make, at first use.
        self.startup_nodes = _nodes(target, ClusterNode)
        #: The options the constructor gets (a region store reads its socket timeout here).
        self.connection_kwargs = options
        #: Whether the constructor has run (the client is connected to the Cluster).
        self.made = False
        self._lazy_target = target
        self._lazy_lock = threading.Lock()
        self._lazy_pid = os.getpid()
        self._lazy_attempts = 0
        self._lazy_failure = ""
        self._lazy_maker: int | None = None  # the thread running the constructor

    def __getattr__(self, name: str) -> Any:
        # Reached only for what the object lacks: before it is made, what the constructor sets.
        # Probes (copy's dunders; getattr(client, "connection_pool", None), which a one-server
        # client answers and a Cluster's lacks too) must not connect, and neither may the
        # constructor itself, which sends commands through this object while it runs.
        if (
            name.startswith(("__", "_lazy_"))
            or name in ("made", "connection_pool")
            or self.made
            or self._lazy_maker == threading.get_ident()
        ):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._make()
        return object.__getattribute__(self, name)

    def _guard(self) -> threading.Lock:
        if self._lazy_pid != os.getpid():  # a forked child: a lock held in the parent stays held
            self._lazy_pid, self._lazy_lock = os.getpid(), threading.Lock()
        return self._lazy_lock

    def _make(self) -> None:
        attempts = self._lazy_attempts
        with self._guard():
            if self.made:
                return
            if self._lazy_attempts != attempts:  # the attempt this call waited for failed
                raise rx.RedisClusterException(f"{self._lazy_failure} (the attempt waited for)")
            self._lazy_attempts += 1
            target, own = self._lazy_target, set(self.__dict__)
            self._lazy_maker = threading.get_ident()
            try:
                redis.RedisCluster.__init__(
                    self, startup_nodes=_nodes(target, ClusterNode), **self.connection_kwargs
                )
            except BaseException as exc:
                self._lazy_failure = f"{type(exc).__name__}: {exc}"
                self._unmake(own)
                if isinstance(exc, TypeError | ValueError):
                    raise _bad_option(target, exc) from exc
                raise
            finally:
                self._lazy_maker = None
            self.made = True

    def _unmake(self, own: set[str]) -> None:
        """Forget what a failed constructor set (its slot table may be half read), closing
        the connections it opened, so that the next call starts again from the URL."""
        manager = self.__dict__.get("nodes_manager")
        for name in set(self.__dict__) - own:
            del self.__dict__[name]
        if manager is not None:
            manager.close()

    def close(self) -> None:
        """Close the client's connections; one never made has none, and connects nowhere."""
        if self.made:
            super().close()


def _nodes(target: Target, node: Any) -> list[Any]:
    """The URL's nodes as ``node`` objects (fresh ones: redis-py keeps state on them)."""
    return [node(host, port) for host, port in target.hosts]


@dataclass(frozen=True, slots=True)
class _Kind:
    """One flavour of redis-py (blocking or asyncio): the classes a URL's client is made of."""

    redis: Any
    sentinel: Any
    cluster: Any
    node: Any
    retry: Any
    #: Whether a Cluster client reads the slot table when made (so it is a ``LazyCluster``).
    connects: bool
    #: Whether TLS connections reuse one SSL context made with the client (``_tls_sync``;
    #: the asyncio pipe keeps the first connection's context itself).
    one_context: bool


_SYNC = _Kind(redis.Redis, TellingSentinel, redis.RedisCluster, ClusterNode, Retry, True, True)
_ASYNC = _Kind(
    aredis.Redis,
    AsyncTellingSentinel,
    aredis.RedisCluster,
    AsyncClusterNode,
    AsyncRetry,
    False,
    False,
)


def _client(url: str, timeout: float, options: dict[str, Any], kind: _Kind) -> Any:
    """The client of ``kind`` for ``url``: a server, a Sentinel's primary or a Cluster."""
    target = parse(url)
    if target.kind == "sentinel":  # as a rediss:// URL's query, it stands over the keywords
        options = {**options, **tls_query(target)}
    check_options(target, options)
    check_tls_files(target, options)
    try:
        if target.kind == "redis":
            client = kind.redis.from_url(target.url, **client_options(timeout, options))
            _check_connection_options(target, client.connection_pool)
            if kind.one_context:
                one_context(target, client.connection_pool)
            else:
                async_context(target, client.connection_pool)
            return client
        merged = _node_options(target, timeout, options)
        if kind.one_context:
            base = SentinelManagedSSLConnection if target.kind == "sentinel" else SSLConnection
            one_context_option(target, merged, base)
        if target.kind == "sentinel":
            sentinel = kind.sentinel(
                list(target.hosts),
                sentinel_kwargs=_sentinel_options(target, timeout, options),
                **merged,
            )
            # A db= option stands when the URL names none (one both name is refused).
            primary = sentinel.master_for(target.service, db=merged.get("db", target.db))
            _check_connection_options(target, primary.connection_pool)
            if not kind.one_context:
                async_context(target, primary.connection_pool)
            return primary
        merged.setdefault("retry", kind.retry(NoBackoff(), 0))
        if kind.connects:
            _check_cluster_options(target, merged)
            return LazyCluster(target, merged)
        cluster = kind.cluster(startup_nodes=_nodes(target, kind.node), **merged)
        async_cluster_context(target, cluster)
        return cluster
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigurationError):
            raise
        raise _bad_option(target, exc) from exc


def sync_client(
    url: str, timeout: float, options: dict[str, Any]
) -> redis.Redis | redis.RedisCluster:
    """The client for ``url``; a Cluster's is a ``LazyCluster``, made at its first use."""
    client: redis.Redis | redis.RedisCluster = _client(url, timeout, options, _SYNC)
    return client


def async_client(
    url: str, timeout: float, options: dict[str, Any]
) -> aredis.Redis | aredis.RedisCluster:
    """The asyncio client for ``url``; it connects on first use."""
    client: aredis.Redis | aredis.RedisCluster = _client(url, timeout, options, _ASYNC)
    return client
