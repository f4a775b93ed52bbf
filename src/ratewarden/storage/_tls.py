"""TLS files read when a store is built: a file that cannot be read is a mistake in the
settings (a ``ConfigurationError`` naming the option and the path), not a store outage
found at the first connection. Used by the Redis and memcached stores alike."""

from __future__ import annotations

import ssl

from ratewarden.errors import ConfigurationError

__all__ = ["client_context"]


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
