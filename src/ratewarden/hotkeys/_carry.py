"""Carrying a key's usage between states, layer by layer.

A rate set's layers are separate states in a store (one state key per rate), so
the units one layer has used are charged to that layer: ``[10/second,
100/minute]`` with 58 used this minute and 8 this second charges 58 to the
minute layer and 8 to the second's. One number for all layers would be bounded
by the tightest layer and hand the wider ones a fresh allowance. A layer that
cannot take its part is charged what it has room for, and says how much it took:
onto cells, the rest goes to the cells with room (a full cell's part dropped would
hand the key's other cells a fresh allowance); back onto the key's own state, the
rest finds it full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratewarden.decision import Decision
from ratewarden.limiter import Flow
from ratewarden.rate import Rate

__all__ = ["charge_layers_flow", "move_flow", "usage"]


def usage(decision: Decision, rates: tuple[Rate, ...]) -> tuple[int, ...]:
    """Per layer of ``rates``, the units in use by a peek's ``decision``: capacity less
    what remains (never below 0)."""
    layers = decision.layers or (decision,)
    return tuple(
        max(0, rate.capacity - layer.remaining) for rate, layer in zip(rates, layers, strict=True)
    )


def charge_layers_flow(
    core: Any, key: str, rates: tuple[Rate, ...], parts: Sequence[int]
) -> Flow[tuple[int, ...]]:
    """Charge ``parts[i]`` units to layer ``i`` of ``key`` (``core``, a plain limiter); the
    units each layer took.

    Equal parts are one hit on the rate set as given (one store call, as a single
    rate always is); unequal parts are one hit per layer, on that layer's rate
    alone. A hit that is denied (a layer short of room) is followed by a peek, and
    each layer is charged what it has room for: what it could not take is the
    caller's to put elsewhere (``CellLimiter.charge_flow`` gives it to other cells).
    """
    if len(set(parts)) == 1:
        part = parts[0]
        if part <= 0:
            return (0,) * len(rates)
        if (yield from core.hit_flow(key, rates, part)).allowed:
            return (part,) * len(rates)
        room = yield from core.peek_flow(key, rates)
        took = []
        for rate, layer in zip(rates, room.layers or (room,), strict=True):
            took.append((yield from _charge_room(core, key, rate, part, layer.remaining)))
        return tuple(took)
    took = []
    for rate, part in zip(rates, parts, strict=True):
        if part <= 0:
            took.append(0)
        elif (yield from core.hit_flow(key, rate, part)).allowed:
            took.append(part)
        else:
            remaining = (yield from core.peek_flow(key, rate)).remaining
            took.append((yield from _charge_room(core, key, rate, part, remaining)))
    return tuple(took)


def _charge_room(core: Any, key: str, rate: Rate, part: int, remaining: int) -> Flow[int]:
    """Charge one layer what it has room for of ``part``; the units it took."""
    units = min(part, remaining)
    if units <= 0 or not (yield from core.hit_flow(key, rate, units)).allowed:
        return 0
    return units


def move_flow(cells: Any, core: Any, into: bool, key: str, rates: tuple[Rate, ...]) -> Flow[None]:
    """Carry a key's usage from its own state (``core``, a plain limiter) onto its ``cells``
    (``into``) or back: per layer, what the destination lacks of the source's usage, so
    that a move made again after it stopped half way charges nothing twice."""
    if into:
        used = usage((yield from core.peek_flow(key, rates)), rates)
        if any(used):
            shown = yield from cells.usage_flow(key, rates)
            lack = [max(0, a - b) for a, b in zip(used, shown, strict=True)]
            if any(lack):
                yield from cells.charge_flow(key, rates, lack)
        return
    shown = yield from cells.usage_flow(key, rates)
    if not any(shown):
        return
    room = yield from core.peek_flow(key, rates)
    own = usage(room, rates)
    lack = [
        max(0, min(a - b, layer.remaining))
        for a, b, layer in zip(shown, own, room.layers or (room,), strict=True)
    ]
    yield from charge_layers_flow(core, key, rates, lack)
