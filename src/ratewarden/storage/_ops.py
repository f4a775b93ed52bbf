"""Store operations beyond the rate algorithms, run on any store the same way.

Token budgets (``gcra_multi``) and fair shares (``fair_share``) each have one
Lua script and one pure Python twin taking the same ARGV and returning the
same reply. An ``Op`` carries both; every store's ``apply(op)`` runs it: the
memory store its pure twin under its lock, a Redis store its script (one atomic
EVALSHA; all keys share one hash tag). Callers plan an ``Op`` and parse the
reply without knowing which store they have.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.checks import check_key
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage._keys import escape

__all__ = ["Op", "arun", "axis_key", "check_name", "record_key", "run"]

#: ``(ARGV, key states, now_us) -> (reply, writes)``; see ``MemoryStore._transact``.
Step = Callable[[Sequence[int | str], list[Any], int], tuple[list[int], Sequence[Any]]]

_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")


@dataclass(frozen=True, slots=True)
class Op:
    """One atomic step: script stem, keys (one hash tag), ARGV (``ARGV[1]``, now, is filled
    in by ``run``) and the pure twin."""

    script: str
    keys: tuple[str, ...]
    args: tuple[int | str, ...]
    step: Step


def check_name(what: str, name: object) -> str:
    """An axis (or similar) name: lowercase letters, digits and ``_``, starting with a letter."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"{what} name {name!r} must be 1-32 lowercase letters, digits or '_', "
            "starting with a letter (e.g. 'tokens', 'input_tokens')"
        )
    return name


def check_id(what: str, value: object) -> str:
    """A reservation (or similar) id: 1-128 of ``A-Z a-z 0-9 _ . : -``."""
    if not isinstance(value, str) or not _ID.match(value):
        raise ConfigurationError(
            f"{what} {value!r} must be 1-128 characters from A-Z a-z 0-9 _ . : - "
            "(leave it out to get a random one)"
        )
    return value


def _head(prefix: str, key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"key {key!r} must be a non-empty string")
    if not key.isascii():
        check_key(key)  # a lone surrogate: the same error as every store's hit
    return f"{prefix}:{{{escape(key)}}}"


def axis_key(prefix: str, key: str, kind: str, axis: str, rate: Rate) -> str:
    """``<prefix>:{<key>}:<kind>:<axis>:<limit>:<period_us>:<capacity>`` (axis already checked)."""
    return f"{_head(prefix, key)}:{kind}:{axis}:{rate.limit}:{rate.period_us}:{rate.capacity}"


def record_key(prefix: str, key: str, kind: str, record_id: str) -> str:
    """``<prefix>:{<key>}:<kind>:<id>``, in the same slot as the key's axes."""
    return f"{_head(prefix, key)}:{kind}:{record_id}"


def run(store: Any, op: Op) -> list[int]:
    """Apply ``op`` atomically on a synchronous store (``store.apply``)."""
    result: list[int] = store.apply(op)
    return result


async def arun(store: Any, op: Op) -> list[int]:
    """The asyncio twin of ``run``."""
    result: list[int] = await store.apply(op)
    return result
