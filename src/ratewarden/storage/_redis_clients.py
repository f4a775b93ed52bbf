"""Build the redis-py client a store URL describes, sync or asyncio.

Clients get the store's timeout as their socket and connect timeouts unless
the options (or a ``redis://`` URL's query) say otherwise. Cluster clients do
not retry on their own: a decision is not idempotent, and the store retries
only what provably did not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

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
from ratewarden.storage._tls import client_context

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


def _tls_file(target: Target, options: dict[str, Any], name: str) -> str | None:
    """The file a TLS option names: the keyword option, else the URL's query (a plain URL)."""
    given = options.get(name)
    if given is None and target.kind == "redis":
        query = dict(parse_qsl(urlsplit(target.url).query))
        given = query.get(name)
    return None if given is None else str(given)


def _check_tls_files(target: Target, options: dict[str, Any]) -> None:
    """Read the CA file and the client certificate and key now, as the memcache store does:
    a missing or unreadable file is a mistake in the settings, not a store outage, and
    redis-py would only find it at the first connection. Only the paths are shown."""
    ca_certs = _tls_file(target, options, "ssl_ca_certs")
    certfile = _tls_file(target, options, "ssl_certfile")
    keyfile = _tls_file(target, options, "ssl_keyfile")
    where = f"store URL {redact(target.url)!r}"
    if ca_certs is not None or certfile is not None:
        client_context(where, ca_certs, certfile, keyfile, options.get("ssl_password"))
    if keyfile is not None and certfile is None:
        raise ConfigurationError(
            f"{where}: ssl_keyfile={keyfile!r} is given without ssl_certfile; give the "
            "client certificate too, or neither"
        )


def _check_connection_options(target: Target, pool: Any) -> None:
    # redis-py makes connections lazily: try one now (no I/O) to catch bad options early.
    try:
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError) as exc:
        raise _bad_option(target, exc) from exc


@dataclass(frozen=True, slots=True)
class _Kind:
    """One flavour of redis-py (blocking or asyncio): the classes a URL's client is made of."""

    redis: Any
    sentinel: Any
    cluster: Any
    node: Any
    retry: Any
    #: Whether a Cluster client reads the slot table when made (so its Redis errors are ours).
    connects: bool


_SYNC = _Kind(redis.Redis, Sentinel, redis.RedisCluster, ClusterNode, Retry, True)
_ASYNC = _Kind(
    aredis.Redis, AsyncSentinel, aredis.RedisCluster, AsyncClusterNode, AsyncRetry, False
)


def _client(url: str, timeout: float, options: dict[str, Any], kind: _Kind) -> Any:
    """The client of ``kind`` for ``url``: a server, a Sentinel's primary or a Cluster."""
    target = parse(url)
    _check_tls_files(target, options)
    try:
        if target.kind == "redis":
            client = kind.redis.from_url(target.url, **client_options(timeout, options))
            _check_connection_options(target, client.connection_pool)
            return client
        merged = _node_options(target, timeout, options)
        if target.kind == "sentinel":
            sentinel = kind.sentinel(
                list(target.hosts), sentinel_kwargs=_sentinel_options(target, timeout), **merged
            )
            return sentinel.master_for(target.service, db=target.db)
        merged.setdefault("retry", kind.retry(NoBackoff(), 0))
        nodes = [kind.node(host, port) for host, port in target.hosts]
        if not kind.connects:
            return kind.cluster(startup_nodes=nodes, **merged)
        try:
            return kind.cluster(startup_nodes=nodes, **merged)
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, f"Redis Cluster {redact(url)}", timeout)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigurationError):
            raise
        raise _bad_option(target, exc) from exc


def sync_client(
    url: str, timeout: float, options: dict[str, Any]
) -> redis.Redis | redis.RedisCluster:
    """The client for ``url``; a Cluster client reads the slot table now."""
    client: redis.Redis | redis.RedisCluster = _client(url, timeout, options, _SYNC)
    return client


def async_client(
    url: str, timeout: float, options: dict[str, Any]
) -> aredis.Redis | aredis.RedisCluster:
    """The asyncio client for ``url``; it connects on first use."""
    client: aredis.Redis | aredis.RedisCluster = _client(url, timeout, options, _ASYNC)
    return client
