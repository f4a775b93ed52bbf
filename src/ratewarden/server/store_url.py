"""A store URL as ``ratewarden serve`` shows and reads it: secrets hidden, the scheme named.

``redacted`` is what every log line, message and ``repr`` prints instead of the
URL itself; ``store_scheme`` tells the embedded memory store from memcached
(``memcache://HOST:PORT[,HOST:PORT...]``, a server ``/PATH`` being a Unix socket,
``memcached://``, ``memcaches://`` over TLS,
``memcache+srv://`` and ``memcaches+srv://`` from a DNS SRV record) and from Redis.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ratewarden.redaction import redact_url

__all__ = ["MEMCACHE_SCHEMES", "redacted", "store_scheme"]

#: The schemes of a memcached store's URL; ``store_scheme`` names each ``memcache``.
MEMCACHE_SCHEMES = ("memcache", "memcached", "memcaches", "memcache+srv", "memcaches+srv")


def redacted(url: str) -> str:
    """``url`` with every password replaced by ``***``, for logs and messages: the store
    URLs' one rule (``ratewarden.redaction.redact_url``): the value of any query option
    named like ``password`` (``?sentinel_password=...``), and all between ``//`` and the
    URL's last ``@`` but the user (a URL without a user, ``redis://:secret@host``, keeps
    its empty user)."""
    return redact_url(url)


def store_scheme(url: str) -> str:
    """``memory`` for the embedded store (``memory`` or ``memory://``), ``memcache`` for
    memcached (``MEMCACHE_SCHEMES``), else the URL's scheme (lowercase)."""
    if url in ("memory", "memory://"):
        return "memory"
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:  # a malformed [IPv6] host: the store's own parser names it
        scheme = url.partition("://")[0].lower()
    return "memcache" if scheme in MEMCACHE_SCHEMES else scheme
