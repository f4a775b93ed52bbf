"""Build the redis-py client a store URL describes, sync or asyncio.

Clients get the store's timeout as their socket and connect timeouts unless
the options (or a ``redis://`` URL's query) say otherwise. Cluster clients do
not retry on their own: a decision is not idempotent, and the store retries
only what provably did not run.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.retry import Retry
from redis.sentinel import Sentinel

from ratewarden.errors import ConfigurationError
from ratewarden.storage._redis_errors import REDIS_ERRORS, raise_storage_error
from ratewarden.storage._redis_url import Target, client_options, parse, redact

__all__ = ["async_client", "sync_client"]


def _sentinel_options(target: Target, timeout: float) -> dict[str, Any]:
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if target.tls:
        options["ssl"] = True
    for name, value in target.query:
        options[name.removeprefix("sentinel_")] = value
    return options


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
        "URL's query and the keyword options passed to from_url"
    )


def _check_connection_options(target: Target, pool: Any) -> None:
    # redis-py makes connections lazily: try one now (no I/O) to catch bad options early.
    try:
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError) as exc:
        raise _bad_option(target, exc) from exc


def sync_client(
    url: str, timeout: float, options: dict[str, Any]
) -> redis.Redis | redis.RedisCluster:
    """The client for ``url``; a Cluster client reads the slot table now."""
    target = parse(url)
    try:
        if target.kind == "redis":
            client = redis.Redis.from_url(target.url, **client_options(timeout, options))
            _check_connection_options(target, client.connection_pool)
            return client
        merged = _node_options(target, timeout, options)
        if target.kind == "sentinel":
            sentinel: Any = Sentinel(  # type: ignore[no-untyped-call]
                list(target.hosts), sentinel_kwargs=_sentinel_options(target, timeout), **merged
            )
            primary: redis.Redis = sentinel.master_for(target.service, db=target.db)
            return primary
        merged.setdefault("retry", Retry(NoBackoff(), 0))
        node: Any = ClusterNode
        nodes = [node(host, port) for host, port in target.hosts]
        try:
            return redis.RedisCluster(startup_nodes=nodes, **merged)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, f"Redis Cluster {redact(url)}", timeout)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigurationError):
            raise
        raise _bad_option(target, exc) from exc


def async_client(
    url: str, timeout: float, options: dict[str, Any]
) -> aredis.Redis | aredis.RedisCluster:
    """The asyncio client for ``url``; it connects on first use."""
    target = parse(url)
    try:
        if target.kind == "redis":
            client = aredis.Redis.from_url(target.url, **client_options(timeout, options))
            _check_connection_options(target, client.connection_pool)
            return client
        merged = _node_options(target, timeout, options)
        if target.kind == "sentinel":
            sentinel: Any = AsyncSentinel(  # type: ignore[no-untyped-call]
                list(target.hosts), sentinel_kwargs=_sentinel_options(target, timeout), **merged
            )
            primary: aredis.Redis = sentinel.master_for(target.service, db=target.db)
            return primary
        merged.setdefault("retry", AsyncRetry(NoBackoff(), 0))
        nodes = [AsyncClusterNode(host, port) for host, port in target.hosts]
        return aredis.RedisCluster(startup_nodes=nodes, **merged)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigurationError):
            raise
        raise _bad_option(target, exc) from exc
