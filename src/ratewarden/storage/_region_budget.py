"""A reconciled budget's window hash: the pure twin of ``lua/region_budget.lua``.

``run(args, states, now_us)`` takes the script's ARGV (``ARGV[1]``, now, is ignored:
the store hands ``now_us``) and the state of its one key, and returns the script's
reply and the writes it makes, as every ``Op``'s twin does (``_ops.Step``). The
memory stores run it under their lock (``MemoryStore.apply``), so a
``MemoryRegionStore`` answers as a ``RegionStore`` does on Redis.

The state is the hash as a dict, field -> whole number, in the order Redis keeps a
small hash's fields (the order of their first write), so that a window's entries
read back in the same order from both stores:

- ``w``: the window number (``now // period``) the counts belong to;
- ``c:<region>``: that region's admitted count in the window (a G-counter entry);
- ``cap``: this region's budget for the window, once a complete round set it.

A merge takes this region's own entries in the peers' hashes too (what they last read
of it): a hash that lost counts (a restart without persistence, FLUSHALL, an eviction,
a failover that lost writes) takes them back. Peers only ever read this hash, so they
hold more of it than it does only after a loss. A hash that has had no merge in this
window (no ``cap``, no peer's entry) was made anew after the loss, so all it counts came
after it: its count becomes its own plus the peers' most. Otherwise the max, as for any
entry (a partial loss: what survived and what peers read overlap).

A merge may also be told of *holds*: peers whose rounds have gone silent (see
``ratewarden.regions.Reconciler``), each as (the window of its hash, region, its cap or
-1, its default cap). A held peer counts as having spent its whole budget for this
window (its cap if its hash is of this window and has one, else its default cap),
so the cap recomputed here leaves that budget to it rather than splitting it again.

A hash of an earlier window is started afresh, and lives until one period past its
window's end: written with that expiry, ``(w + 2) * period``. Redis holds it as long
in its own time, and a day at least with an injected clock (``ttl_ms`` of the
prelude); a hash read after its window has rolled over counts for nothing either way.
The arithmetic is whole numbers, as the script's doubles are below 2^53.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratewarden.errors import StorageError

__all__ = ["Hold", "entries", "held", "run"]

#: One (window, region, count) entry of a region's window hash.
Entry = tuple[int, str, int]
#: A silent peer's budget: (its hash's window or -1, region, its cap or -1, its default cap).
Hold = tuple[int, str, int, int]
#: ``(index into keys, state, absolute expiry in us)``
Write = tuple[int, Any, int]


def run(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[list[int], list[Write]]:
    """The reply of ``region_budget.lua`` for these ARGV and these hashes, and its writes."""
    operation = args[1]
    if operation == "hit":
        return _hit(args, states, now)
    period = int(args[2])
    window, fields, _ = _roll(states[0], period, now)
    own_field = f"c:{args[3]}"
    expires_at = (window + 2) * period
    if operation != "merge":
        raise StorageError(f"ratewarden: region_budget has no operation {operation}")
    region = str(args[3])
    first = 9 + 4 * int(args[8])
    # Made anew since its window began (or since a loss): no cap and no peer's entry yet.
    fresh = "cap" not in fields and not any(
        name.startswith("c:") and name != own_field for name in fields
    )
    seen_own = 0
    for at in range(first, len(args), 3):
        if int(args[at]) != window:
            continue
        seen = int(args[at + 2])
        if str(args[at + 1]) == region:
            seen_own = max(seen_own, seen)
        elif seen > fields.get(f"c:{args[at + 1]}", 0):
            fields[f"c:{args[at + 1]}"] = seen
    kept = fields.get(own_field, 0)
    if seen_own > kept:
        # Peers only ever read this hash, so they hold more of it only once it lost counts.
        fields[own_field] = kept + seen_own if fresh else seen_own
    total = sum(count for name, count in fields.items() if name.startswith("c:"))
    own = fields.get(own_field, 0)
    cap = -1
    if args[7] == "1":
        unspent = 0
        for at in range(9, first, 4):
            peer = str(args[at + 1])
            if peer == region:
                continue
            budget = int(args[at + 2])
            if int(args[at]) != window or budget < 0:
                budget = int(args[at + 3])
            unspent += max(0, budget - fields.get(f"c:{peer}", 0))
        left = max(0, int(args[4]) - total - unspent)
        cap = own + left * int(args[5]) // int(args[6])
        fields["cap"] = cap
    return [window, total, own, cap], [(0, fields, expires_at)]


def _roll(found: dict[str, int] | None, period: int, now: int) -> tuple[int, dict[str, int], bool]:
    """The window now, a copy of the hash's fields (emptied if of an earlier window), and
    whether it was."""
    window = now // period
    rolled = found is None or found.get("w") != window
    return window, {"w": window} if rolled else dict(found or ()), rolled


def _hit(
    args: Sequence[int | str], states: Sequence[Any], now: int
) -> tuple[list[int], list[Write]]:
    """``hit`` over every key of ``states`` (the layers of one key): all charged or none."""
    own_field, cost = f"c:{args[3]}", int(args[4])
    reply, layers = [1], []
    for i, found in enumerate(states):
        at = 2 if i == 0 else 2 * i + 4
        period = int(args[at])
        window, fields, rolled = _roll(found, period, now)
        default = int(args[5] if i == 0 else args[at + 1])
        own, cap = fields.get(own_field, 0), fields.get("cap", default)
        if own + cost > cap:
            reply[0] = 0
        reply.extend((own, cap, (window + 1) * period - now))
        layers.append((fields, rolled, (window + 2) * period))
    charged = reply[0] == 1 and cost > 0
    writes: list[Write] = []
    for i, (fields, rolled, expires_at) in enumerate(layers):
        if charged:
            reply[3 * i + 1] = fields[own_field] = fields.get(own_field, 0) + cost
        if rolled or charged:
            writes.append((i, fields, expires_at))
    return reply, writes


def held(fields: dict[str, int]) -> tuple[int, int]:
    """A window hash's (window, cap), -1 for either it does not have."""
    return fields.get("w", -1), fields.get("cap", -1)


def entries(fields: dict[str, int]) -> list[Entry]:
    """A window hash as (window, region, count) entries; an empty hash has none."""
    window = fields.get("w")
    if window is None:
        return []
    return [(window, name[2:], count) for name, count in fields.items() if name.startswith("c:")]
