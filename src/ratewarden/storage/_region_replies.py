"""How a region store on Redis reads its replies: ``RegionBase``'s (``_region_base.py``).

Each reader turns the replies of one call (a script's, or a pipeline's: a list, one
each, as redis-py's reply callbacks left them) into the store's answer, and raises one
of ``REPLY_ERRORS`` for a reply of a shape Redis does not send, which the store raises
as its ``StorageError`` (``_redis_errors.wrong_reply``). A server that speaks Redis's
protocol but is not Redis (a proxy, another RESP service, a wrong port) answers so:
without the checks a string read as its bytes (a script's reply as numbers, an HGETALL's
pairs as a hash), and the rest leaked ``TypeError``, ``ValueError`` or ``AttributeError``
to the budgets. What redis-py raises reading such a reply itself is ``UNREADABLE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ratewarden.storage._decisions import REPLY_ERRORS
from ratewarden.storage._region_budget import Entry, entries, held
from ratewarden.storage._region_plan import PeerRound, decode_regions

__all__ = [
    "SCRIPT",
    "UNREADABLE",
    "active_members",
    "all_entries",
    "demand_and_taken",
    "demand_count",
    "ints",
    "peer_round",
    "written",
]

#: What redis-py itself raises reading a reply of a shape Redis does not send: its
#: handshake reads ``HELLO``'s map (``.get``), its reply callbacks read HGETALL's pairs and
#: ZADD's number. Caught around its reading alone, never around the store's own code.
UNREADABLE = (*REPLY_ERRORS, AttributeError)
#: What a store's errors call the budget's script.
SCRIPT = "a ratewarden script"


def ints(reply: Sequence[Any]) -> list[int]:
    """A script's reply as whole numbers."""
    if type(reply) is not list:  # a string would read as its bytes
        raise TypeError(f"a script's reply is a list of numbers, not {type(reply).__name__}")
    return [int(value) for value in reply]


def _text(value: bytes | str) -> str:
    """A name, a member or the weights taken: bytes, or a string if the client decodes."""
    if type(value) is bytes:
        return value.decode()
    if type(value) is not str:  # HGETALL's pairs of a string's bytes are numbers
        raise TypeError(f"a string, not {type(value).__name__}")
    return value


def _number(value: bytes | str) -> int:
    """A count or a time, which Redis keeps as a string."""
    return int(_text(value))


def _fields(found: Mapping[Any, Any]) -> dict[str, int]:
    if type(found) is not dict:
        raise TypeError(f"HGETALL answers a hash, not {type(found).__name__}")
    return {_text(name): _number(value) for name, value in found.items()}


def peer_round(replies: list[Any]) -> PeerRound:
    """``read_round``'s GET of the last round, GET of the regions, and HGETALL per member."""
    hashes = [_fields(found) for found in replies[2:]]
    last = None if replies[0] is None else _number(replies[0])
    regions = decode_regions(None if replies[1] is None else _text(replies[1]))
    return PeerRound(last, [entries(f) for f in hashes], [held(f) for f in hashes], regions)


def written(replies: list[Any]) -> None:
    """A write's replies: whole numbers, and True for SET's OK and EXPIRE's 1 (as redis-py
    reads them)."""
    for reply in replies:
        if reply is not True and type(reply) is not int:
            raise TypeError("a write is answered a number or OK")


def active_members(replies: list[Any]) -> list[str]:
    """``active``'s ZRANGEBYSCORE."""
    if type(replies[0]) is not list:
        raise TypeError(f"ZRANGEBYSCORE answers a list, not {type(replies[0]).__name__}")
    return [_text(member) for member in replies[0]]


def all_entries(replies: list[Any]) -> list[list[Entry]]:
    """``read_counts``' HGETALLs: each window hash as (window, region, count) entries; an
    empty hash has none."""
    return [entries(_fields(found)) for found in replies]


def demand_count(replies: list[Any]) -> int | None:
    """``demand``'s HGET."""
    return None if replies[0] is None else _number(replies[0])


def demand_and_taken(replies: list[Any]) -> tuple[int | None, str | None]:
    """``demand_and_taken``'s HMGET of two fields."""
    if type(replies[0]) is not list:
        raise TypeError(f"HMGET answers a list, not {type(replies[0]).__name__}")
    found, taken = replies[0]
    return (None if found is None else _number(found)), (None if taken is None else _text(taken))
