"""A store URL as ``ratewarden serve`` shows and reads it: secrets hidden, the scheme named.

``redacted`` is what every log line, message and ``repr`` prints instead of the
URL itself; ``store_scheme`` tells the embedded memory store from memcached
(``memcache://HOST:PORT[,HOST:PORT...]``, a server ``/PATH`` being a Unix socket,
``memcached://``, ``memcaches://`` over TLS,
``memcache+srv://`` and ``memcaches+srv://`` from a DNS SRV record) and from Redis.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["MEMCACHE_SCHEMES", "redacted", "store_scheme"]

#: The schemes of a memcached store's URL; ``store_scheme`` names each ``memcache``.
MEMCACHE_SCHEMES = ("memcache", "memcached", "memcaches", "memcache+srv", "memcaches+srv")

_PASSWORD_OPTION = re.compile(r"([?&][^=&#]*password[^=&#]*=)[^&#]*", re.IGNORECASE)


def redacted(url: str) -> str:
    """``url`` with every password replaced by ``***``, for logs and messages.

    That is the password of its ``user:password@`` part (a URL without a user,
    ``redis://:secret@host``, keeps its empty user) and the value of any query
    option named like ``password`` (``?sentinel_password=...``).
    """
    url = _PASSWORD_OPTION.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***@" + url.rpartition("@")[2] if "@" in url else url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    credentials, _, host = authority.rpartition("@")
    user, colon, _ = credentials.partition(":")
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}://{shown}@{host}{slash}{path}"


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
