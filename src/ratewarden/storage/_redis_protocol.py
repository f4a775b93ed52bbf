"""Sans-I/O pieces shared by the sync and async Redis stores.

Commands are packed once by hiredis (keys as UTF-8) and sent as they are; error
replies come back as ``hiredis.ReplyError`` values and ``recovery`` says what
to do about one. Both stores drive the same short loop around it, so a script
flush, a Sentinel failover or a Cluster resharding is handled the same way.
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
    "ConnectFailed",
    "ConnectionFactory",
    "Recovery",
    "Sendable",
    "eval_command",
    "evalsha_command",
    "pack",
    "recovery",
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


def evalsha_command(script: Script, keys: Sequence[str], args: Sequence[Sendable]) -> bytes:
    return pack(("EVALSHA", script.sha, len(keys), *keys, *args))


def eval_command(script: Script, keys: Sequence[str], args: Sequence[Sendable]) -> bytes:
    return pack(("EVAL", script.source, len(keys), *keys, *args))
