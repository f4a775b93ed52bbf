"""Passwords out of store URLs, for every message and log line that shows one.

A leaf: the storage URL parsers (``storage._redis_url``) and the server's store
settings (``server.store_url``) both show URLs, and must hide the same things.
"""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_PASSWORD_OPTION = re.compile(r"([?&][^=&]*password[^=&]*=)[^&]*", re.IGNORECASE)
#: A user name holding one of these is not one: the password held an unencoded separator.
_RESERVED = frozenset("/?#@")


def redact_url(url: str) -> str:
    """``url`` with its passwords replaced by ``***``: the value of every query option named
    like ``password`` (``?sentinel_password=...``, up to the next ``&``), and all between
    ``//`` and the URL's last ``@`` but the user (``u:***@``; ``***@`` with no ``:``).

    The last ``@``, not the first after ``//``: a password holding an unencoded ``/``,
    ``@``, ``#`` or ``?`` then stays hidden, at the cost of hiding more when a query
    value holds an ``@``.
    """
    url = _PASSWORD_OPTION.sub(r"\1***", url)
    start = url.find("//") + 2 if "//" in url else 0
    at = url.rfind("@")
    if at < start:
        return url
    user, colon, _ = url[start:at].partition(":")
    shown = f"{user}:***" if colon and not _RESERVED & set(user) else "***"
    return f"{url[:start]}{shown}{url[at:]}"
