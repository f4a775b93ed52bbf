"""Which servers can run ratewarden's scripts: asked once per connection, with ``HELLO 2``.

The fixed window's script sets a key's expiry at its window's end (``SET ... PXAT``,
Redis 6.2) and keeps it on later hits (``SET ... KEEPTTL``, Redis 6.0). An older Redis
rejects every such call with a syntax error, which would reach each rule's failure mode
one call at a time (with ``failure_mode: open``, every request allowed). So a new
connection asks the server what it is, and a Redis older than ``MIN_REDIS`` is refused
then, with the version found and the one needed. So is a Sentinel (``mode sentinel``):
a ``redis://`` URL given a Sentinel's port reaches a server that answers ``PING`` but
knows none of the commands a decision sends.

``HELLO 2`` (Redis 6.0+, any Valkey) answers the server's name and version and keeps
the connection on RESP2. When it cannot tell (``HELLO`` unknown: Redis before 6.0, or a
proxy that does not pass it on; ``NOPERM`` from an ACL), nothing is refused: the
scripts' own errors then say what is wrong. Valkey forked from Redis 7.2, so every
Valkey passes.
"""

from __future__ import annotations

from typing import Any

from redis import exceptions as rx

__all__ = ["HELLO", "MIN_REDIS", "ServerUnusable", "check_hello"]

#: The oldest Redis whose scripts run as written (``SET ... PXAT``).
MIN_REDIS = (6, 2)

#: Asked on every new connection, after redis-py's own handshake (AUTH, SELECT).
HELLO = ("HELLO", "2")


class ServerUnusable(rx.RedisError):
    """The server answered, and waiting will not help: it cannot run ratewarden's scripts,
    or it refused the store's credentials or database (``_redis_errors.refusal``)."""


def check_hello(reply: Any, where: str) -> None:
    """Raise ``ServerUnusable`` when ``reply`` (``HELLO 2``'s) names a Sentinel or a Redis
    older than ``MIN_REDIS``; anything else (another server, a reply not understood) passes."""
    fields = _fields(reply)
    if fields.get("mode") == "sentinel":
        raise ServerUnusable(_a_sentinel(where))
    server, version = fields.get("server"), fields.get("version")
    if server != "redis" or version is None:
        return
    found = _version(version)
    if found is not None and found < MIN_REDIS:
        needed = ".".join(map(str, MIN_REDIS))
        raise ServerUnusable(
            f"{where} runs Redis {version}; ratewarden's scripts need Redis {needed} or later "
            "(or any Valkey): upgrade the server"
        )


def _a_sentinel(where: str) -> str:
    """A plain URL pointed at a Sentinel's port (26379): it answers PING, and refuses every
    script as an unknown command, which would read as a bug rather than this mistake."""
    address = where if ":" in where and not where.startswith("/") else "HOST:PORT"
    return (
        f"{where} is a Redis Sentinel, not the server that keeps the counts: it cannot run "
        f"ratewarden's scripts; point the store at the Sentinels with "
        f"redis+sentinel://{address}/SERVICE (rediss+sentinel:// over TLS; list every "
        "Sentinel, comma-separated), SERVICE being the name they monitor the primary under "
        "(SENTINEL MASTERS lists it): waiting will not help"
    )


def _fields(reply: Any) -> dict[str, str]:
    """``HELLO``'s flat ``[name, value, ...]`` reply (a dict from some clients) as text."""
    if isinstance(reply, dict):
        pairs = list(reply.items())
    elif isinstance(reply, list | tuple):
        pairs = list(zip(reply[::2], reply[1::2], strict=False))
    else:
        return {}
    return {_text(name): _text(value) for name, value in pairs}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _version(text: str) -> tuple[int, ...] | None:
    """``"6.0.16"`` -> ``(6, 0, 16)``; None when it does not start with a number."""
    parts = []
    for part in text.split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None
