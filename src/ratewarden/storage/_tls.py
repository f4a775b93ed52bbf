"""TLS files read when a store is built: a file that cannot be read is a mistake in the
settings (a ``ConfigurationError`` naming the option and the path), not a store outage
found at the first connection. Used by the Redis and memcached stores alike.

``prebuilt_context`` does for the asyncio Redis store what ``_tls_sync`` does for the
blocking one: the context is built with the store, not inside its first call's timeout.
"""

from __future__ import annotations

import ssl
from typing import Any

from ratewarden.errors import ConfigurationError

__all__ = ["client_context", "prebuilt_context"]


def client_context(
    where: str,
    ca_certs: str | None,
    certfile: str | None = None,
    keyfile: str | None = None,
    password: str | None = None,
) -> ssl.SSLContext:
    """The client context of these files (``ca_certs`` None: the system's CAs), each read
    now; ``where`` starts every message (``"memcache TLS"``, ``"store URL '...'"``)."""
    try:
        context = ssl.create_default_context(cafile=ca_certs)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"{where}: ssl_ca_certs={ca_certs!r} cannot be read as PEM certificates: {exc}"
        ) from None
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile, password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"{where}: ssl_certfile={certfile!r} / ssl_keyfile={keyfile!r} cannot be read "
                f"as a PEM certificate and its key: {exc}"
            ) from None
    return context


def prebuilt_context(base: type, options: dict[str, Any], where: str) -> type:
    """``base`` (redis-py's asyncio ``SSLConnection`` or a subclass) whose connections share
    one ``RedisSSLContext``, its SSL context built now from ``options`` (a connection's).

    redis-py builds the context at a connection's first ``connect``: loading the system's
    CA store (~45-70 ms of CPU) made the first call of a store on ``rediss://`` often miss
    the 20 ms default timeout. The store's pipe keeps this one for every reconnect.
    """
    from redis.exceptions import RedisError  # here: the memcache stores use this module too

    try:
        shared = base(**options).ssl_context
        shared.get()
    except (OSError, ValueError, TypeError, RedisError) as exc:  # ssl.SSLError is an OSError
        raise ConfigurationError(
            f"{where}: the TLS options cannot make an SSL context: {exc}"
        ) from None

    class Prebuilt(base):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.ssl_context = shared

    Prebuilt.__name__ = Prebuilt.__qualname__ = f"Prebuilt{base.__name__}"
    return Prebuilt
