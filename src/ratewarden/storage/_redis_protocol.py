"""Sans-I/O pieces shared by the sync and async Redis stores.

Commands are packed once (keys as UTF-8) and sent as they are; error replies
come back as ``hiredis.ReplyError`` values and ``recovery`` says what to do
about one. Both stores drive the same short loop around it, so a script flush,
a Sentinel failover or a Cluster resharding is handled the same way.

A rate decision's ``EVALSHA`` is packed from a ``Template`` made once per call
shape (a ``hit_all``'s from a ``BatchTemplate``, once per shape of its calls):
everything but the user's keys (and ``now``, when a clock is given) is encoded
ahead of time. The packed request is the one description of a call that
the routers pass around; the rare paths that need it in another form (``EVAL``
after NOSCRIPT, a Cluster redirection through redis-py) derive it from those
bytes (``as_eval``, ``unpack``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, cast

import hiredis
from redis import exceptions as rx

from ratewarden.storage._scripts import Script

__all__ = [
    "MAX_ATTEMPTS",
    "PING",
    "ConnectFailed",
    "BatchTemplate",
    "ConnectionFactory",
    "Recovery",
    "Sendable",
    "Template",
    "as_eval",
    "checked",
    "cluster_where",
    "eval_command",
    "evalsha_command",
    "moved",
    "pack",
    "recovery",
    "redirection",
    "retry",
    "unpack",
]

#: Arguments the packer accepts.
Sendable = str | bytes | int

#: Makes one unconnected redis-py connection (whose classes are untyped).
ConnectionFactory = Callable[[], Any]

# hiredis's stub types the argument as a 1-tuple and leaves the result untyped.
pack = cast(Callable[[tuple[Sendable, ...]], bytes], hiredis.pack_command)

#: Requests one call may send: EVALSHA, then EVAL after NOSCRIPT, or a retry after READONLY.
MAX_ATTEMPTS = 3


class ConnectFailed(rx.ConnectionError):
    """Connecting failed: nothing was sent, so the caller may try another node."""


class Recovery(enum.Enum):
    """What to do after an error reply to a script call."""

    #: NOSCRIPT: the server lost its script cache (restart, failover, new node,
    #: SCRIPT FLUSH). Nothing ran; send EVAL, which runs the script and caches it.
    LOAD = "load"
    #: READONLY: our connection points at a demoted primary. A script stops at
    #: its first write, before changing anything, so reconnect (Sentinel then
    #: names the new primary) and send again.
    RECONNECT = "reconnect"
    #: MOVED / ASK / TRYAGAIN: the slot is elsewhere or migrating; nothing ran.
    #: Let the Cluster client follow the redirection and refresh its slot table.
    REDIRECT = "redirect"
    #: Anything else: raise it at the error boundary.
    FAIL = "fail"


_CODES = {
    "NOSCRIPT": Recovery.LOAD,
    "READONLY": Recovery.RECONNECT,
    "MOVED": Recovery.REDIRECT,
    "ASK": Recovery.REDIRECT,
    "TRYAGAIN": Recovery.REDIRECT,
}


def recovery(reply: hiredis.ReplyError) -> Recovery:
    code = str(reply).split(" ", 1)[0]
    return _CODES.get(code, Recovery.FAIL)


def retry(
    reply: hiredis.ReplyError,
    script: Script,
    evalsha: bytes,
    loading: Callable[[str], bool] | None = None,
) -> tuple[bool, bytes]:
    """What to send after the error ``reply`` to the EVALSHA ``evalsha`` of ``script``:
    ``(reconnect first, request)``; raises ``reply`` when nothing may be sent again.

    After NOSCRIPT the request is the EVAL, unless ``loading(script.sha)`` says an EVAL
    of it already went out on the same connection (the asyncio pipe's first retry),
    after which the EVALSHA finds it loaded. Both stores drive this in their loop.
    """
    action = recovery(reply)
    if action is Recovery.LOAD:
        if loading is not None and loading(script.sha):
            return False, evalsha
        return False, as_eval(script, evalsha)
    if action is Recovery.RECONNECT:
        return True, evalsha
    raise reply


def checked(reply: Any) -> Any:
    """``reply``, or raised when it is an error reply."""
    if type(reply) is hiredis.ReplyError:
        raise reply
    return reply


#: A packed PING, sent to every server a store uses by its ``ping``.
PING = pack(("PING",))


def cluster_where(nodes: Sequence[Any]) -> str:
    """How a store names a Redis Cluster in errors and ``repr``: up to three of its nodes."""
    return "Redis Cluster " + ",".join(f"{node.host}:{node.port}" for node in nodes[:3])


def moved(before: Any, now: Any) -> Any:
    """The slot's primary ``now`` after a failed connect to ``before`` and a refreshed slot
    table; ``ConnectFailed`` when it is still the node that failed (nothing was sent)."""
    if now.name == before.name:
        raise ConnectFailed(f"cannot connect to {before.name}, still the primary of its slot")
    return now


def redirection(script: Script, packed: bytes) -> tuple[list[Any], list[Any]]:
    """The EVALSHA ``packed`` of ``script`` as redis-py's Cluster client takes it after a
    MOVED / ASK / TRYAGAIN: its arguments, and those of the EVAL to send on NOSCRIPT."""
    parts = unpack(packed)
    return ["EVALSHA", *parts[1:]], ["EVAL", script.source, *parts[2:]]


def evalsha_command(script: Script, keys: Sequence[str], args: Sequence[Sendable]) -> bytes:
    return pack(("EVALSHA", script.sha, len(keys), *keys, *args))


def eval_command(script: Script, keys: Sequence[str], args: Sequence[Sendable]) -> bytes:
    return pack(("EVAL", script.source, len(keys), *keys, *args))


def _bulk(value: Sendable) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _evalsha_head(script: Script, count: int) -> bytes:
    """``*<count>`` and the command name and SHA of an EVALSHA of ``count`` parts."""
    return b"*%d\r\n$7\r\nEVALSHA\r\n" % count + _bulk(script.sha)


#: ``now`` when the script reads Redis TIME: an empty bulk string.
_NO_NOW = _bulk("")


class Template:
    """The EVALSHA of one call shape, packed but for the user's key and ``now``.

    ``pack(escape(key), now_us)`` gives the same command as
    ``evalsha_command(script, keys, [now or "", cost, *params])`` with the
    keys ``<prefix>:{<escaped key>}<suffix>``: per key, one length and a join.
    """

    __slots__ = ("_head", "_keys", "_prefix", "_tail", "script")

    def __init__(
        self, script: Script, prefix: str, suffixes: Sequence[str], args: Sequence[Sendable]
    ) -> None:
        # args: cost, then every layer's params (``now`` goes before them).
        self.script = script
        count = 3 + len(suffixes) + 1 + len(args)
        self._head = _evalsha_head(script, count) + _bulk(len(suffixes))
        self._prefix = f"{prefix}:{{".encode()
        self._keys = _key_parts(self._prefix, suffixes)
        self._tail = b"".join(_bulk(arg) for arg in args)

    def pack(self, tag: str, now_us: int | None) -> bytes:
        """The request for the user key escaped as ``tag`` at ``now_us`` (None: Redis TIME)."""
        data = tag.encode()
        size = len(data)
        prefix = self._prefix
        parts = [self._head]
        for length, ending in self._keys:
            parts += (b"$%d\r\n" % (length + size), prefix, data, ending)
        parts.append(_NO_NOW if now_us is None else _bulk(now_us))
        parts.append(self._tail)
        return b"".join(parts)


class BatchTemplate:
    """The EVALSHA of one ``hit_all`` shape (its calls' shapes, in order), packed but for
    the user keys and ``now``.

    ``pack(tags, now_us)`` gives the same command as ``evalsha_command(script, keys,
    [now or "", *args])`` with each call's keys ``<prefix>:{<its escaped key>}<suffix>``,
    as ``Template`` does for one call.
    """

    __slots__ = ("_calls", "_head", "_prefix", "_tail", "script")

    def __init__(
        self,
        script: Script,
        prefix: str,
        suffixes: Sequence[Sequence[str]],
        args: Sequence[Sendable],
    ) -> None:
        # suffixes: each call's layers; args: everything after ``now``.
        self.script = script
        keys = sum(len(layers) for layers in suffixes)
        self._head = _evalsha_head(script, 3 + keys + 1 + len(args)) + _bulk(keys)
        self._prefix = f"{prefix}:{{".encode()
        self._calls = tuple(_key_parts(self._prefix, layers) for layers in suffixes)
        self._tail = b"".join(_bulk(arg) for arg in args)

    def pack(self, tags: Sequence[str], now_us: int | None) -> bytes:
        """The request for the calls' user keys escaped as ``tags`` at ``now_us``."""
        prefix = self._prefix
        parts = [self._head]
        for tag, keys in zip(tags, self._calls, strict=True):
            data = tag.encode()
            size = len(data)
            for length, ending in keys:
                parts += (b"$%d\r\n" % (length + size), prefix, data, ending)
        parts.append(_NO_NOW if now_us is None else _bulk(now_us))
        parts.append(self._tail)
        return b"".join(parts)


def _key_parts(prefix: bytes, suffixes: Sequence[str]) -> tuple[tuple[int, bytes], ...]:
    """Per key of one call: its length without the tag, and what follows the tag up to the
    next part."""
    return tuple(
        (len(prefix) + len(ending), ending + b"\r\n")
        for ending in (("}" + suffix).encode() for suffix in suffixes)
    )


def unpack(packed: bytes) -> list[bytes]:
    """The parts of a packed command, as bytes (a request is an array of bulk strings)."""
    reader = hiredis.Reader()
    reader.feed(packed)
    parts: list[bytes] = reader.gets()
    return parts


def as_eval(script: Script, packed: bytes) -> bytes:
    """The EVAL of ``script`` with the keys and arguments of the EVALSHA ``packed``."""
    parts = unpack(packed)
    return pack(("EVAL", script.source, *parts[2:]))
