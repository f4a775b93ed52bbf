"""TLS for the clients a store URL describes: its files read, and one SSL context per store.

``check_tls_files`` reads the CA file and the client certificate and key when the store
is made, as the memcache store does: a missing or unreadable file is a mistake in the
settings, not a store outage, and redis-py would only find it at the first connection.
The other functions give a client's TLS connections one context built with the store
(``_tls_sync`` for the blocking clients, ``_tls.prebuilt_context`` for asyncio's): loading
the system's CA store costs tens of ms of CPU, more than the 20 ms default timeout.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis.asyncio as aredis
from redis.asyncio.sentinel import (
    SentinelManagedSSLConnection as AsyncSentinelManagedSSLConnection,
)
from redis.connection import SSLConnection

from ratewarden.errors import ConfigurationError
from ratewarden.storage._redis_url import Target, redact
from ratewarden.storage._tls import client_context, prebuilt_context
from ratewarden.storage._tls_sync import reusing_context

__all__ = [
    "async_cluster_context",
    "async_context",
    "check_tls_files",
    "one_context",
    "one_context_option",
]


def _tls_file(target: Target, options: dict[str, Any], name: str) -> str | None:
    """The file a TLS option names: the keyword option, else the URL's query (a plain URL)."""
    given = options.get(name)
    if given is None and target.kind == "redis":
        query = dict(parse_qsl(urlsplit(target.url).query))
        given = query.get(name)
    return None if given is None else str(given)


def check_tls_files(target: Target, options: dict[str, Any]) -> None:
    """Read the CA file and the client certificate and key now, as the memcache store does:
    a missing or unreadable file is a mistake in the settings, not a store outage, and
    redis-py would only find it at the first connection. Only the paths are shown."""
    ca_certs = _tls_file(target, options, "ssl_ca_certs")
    certfile = _tls_file(target, options, "ssl_certfile")
    keyfile = _tls_file(target, options, "ssl_keyfile")
    where = f"store URL {redact(target.url)!r}"
    if ca_certs is not None or certfile is not None:
        try:
            client_context(where, ca_certs, certfile, keyfile, options.get("ssl_password"))
        except ConfigurationError:
            if certfile is not None and keyfile is None and not _holds_key(certfile):
                raise ConfigurationError(
                    f"{where}: ssl_certfile={certfile!r} holds no private key, and no "
                    "ssl_keyfile is given; give the certificate's key as ssl_keyfile (or one "
                    "file holding both)"
                ) from None
            raise
    if keyfile is not None and certfile is None:
        raise ConfigurationError(
            f"{where}: ssl_keyfile={keyfile!r} is given without ssl_certfile; give the "
            "client certificate too, or neither"
        )


def _holds_key(path: str) -> bool:
    """Whether the PEM file ``path`` holds a private key (True when it cannot be read: the
    reading's own error is the one to show)."""
    try:
        with open(path, encoding="ascii", errors="replace") as pem:
            return "PRIVATE KEY-----" in pem.read()
    except OSError:
        return True


def one_context(target: Target, pool: Any) -> None:
    """Make a plain ``rediss://`` pool's TLS connections share one context."""
    if pool.connection_class is SSLConnection:  # not the caller's own class
        where = f"store URL {redact(target.url)!r}"
        reusing = reusing_context(SSLConnection, pool.connection_kwargs, where)
        pool.connection_class = reusing or SSLConnection


def one_context_option(target: Target, options: dict[str, Any], base: type) -> None:
    """Give Sentinel's primary or a Cluster's nodes, over TLS, a class sharing one context."""
    if options.get("ssl") and not {"connection_class", "connection_pool"} & set(options):
        where = f"store URL {redact(target.url)!r}"
        reusing = reusing_context(base, options, where)
        if reusing is not None:
            options["connection_class"] = reusing


#: redis-py's asyncio TLS classes, whose context ``prebuilt_context`` builds with the store.
_ASYNC_TLS = (aredis.SSLConnection, AsyncSentinelManagedSSLConnection)


def async_context(target: Target, pool: Any) -> None:
    """Build an asyncio ``rediss://`` pool's SSL context now (a Sentinel's primary's too)."""
    if pool.connection_class in _ASYNC_TLS:  # not the caller's own class
        where = f"store URL {redact(target.url)!r}"
        pool.connection_class = prebuilt_context(
            pool.connection_class, pool.connection_kwargs, where
        )


def async_cluster_context(target: Target, client: Any) -> None:
    """``async_context`` for an asyncio Cluster client's nodes, known and found later."""
    manager = client.nodes_manager
    nodes = list(manager.startup_nodes.values())
    if nodes and nodes[0].connection_class is aredis.SSLConnection:
        where = f"store URL {redact(target.url)!r}"
        made = prebuilt_context(aredis.SSLConnection, nodes[0].connection_kwargs, where)
        for node in nodes:
            node.connection_class = made
        client.connection_kwargs["connection_class"] = made
        manager.connection_kwargs["connection_class"] = made
