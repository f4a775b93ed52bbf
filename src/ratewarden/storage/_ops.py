"""Store operations beyond the rate algorithms, run on any store the same way.

Token budgets (``gcra_multi``) and fair shares (``fair_share``) each have one
Lua script and one pure Python twin taking the same ARGV and returning the
same reply. An ``Op`` carries both; every store's ``apply(op)`` runs it: the
memory store its pure twin under its lock, a Redis store its script (one atomic
EVALSHA; all keys share one hash tag). Callers plan an ``Op`` (with ``axis_key``
and ``record_key`` for its keys) and hand it to a limiter's ``apply_flow``; they
parse the reply without knowing which store they have. ``ratewarden.storage``
exports these, and ``ratewarden.limiter`` re-exports them for adapters (which
import no store).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.checks import check_key
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage._keys import escape

__all__ = ["Op", "axis_key", "joined_ops", "record_key"]

#: ``(ARGV, key states, now_us) -> (reply, writes)``; see ``MemoryStore._transact``.
Step = Callable[[Sequence[int | str], list[Any], int], tuple[list[int], Sequence[Any]]]


@dataclass(frozen=True, slots=True)
class Op:
    """One atomic step: script stem, keys (one hash tag), ARGV (``ARGV[1]``, now, is filled
    in by the store) and the pure twin."""

    script: str
    keys: tuple[str, ...]
    args: tuple[int | str, ...]
    step: Step


def joined_ops(ops: Sequence[Op]) -> Op:
    """``ops`` as one step of their pure twins, for a store that runs twins (the memory
    store's ``apply``, under its lock once): each op's step sees what the ones before it
    wrote, as if each were applied in turn. The reply is every op's reply, in order.
    Never sent to Redis: a script's keys must share a hash tag, these need not."""
    at: dict[str, int] = {}  # each key once, in the order the ops name them
    where = [[at.setdefault(key, len(at)) for key in op.keys] for op in ops]

    def step(args: Sequence[int | str], states: list[Any], now: int) -> tuple[Any, list[Any]]:
        latest: dict[int, Any] = {}
        replies = []
        for op, places in zip(ops, where, strict=True):
            reply, writes = op.step(op.args, [states[i] for i in places], now)
            for index, state, expires_at in writes:
                place = places[index]
                latest[place] = (place, state, expires_at)
                states[place] = state if expires_at > now else None
            replies.append(reply)
        return replies, list(latest.values())

    return Op("", tuple(at), ("",), step)


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
