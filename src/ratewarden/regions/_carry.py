"""A key's usage carried over a rebalance of ``RegionalQuota``.

A region enforces its allowance of a global rate as a local rate (``Rate(allowance,
period, burst)``), and a store names a bucket's state by its rate (a fixed window's too,
under a quota: below): when a rebalance moves the allowance, the key's next hit lands on a
new, empty state. Without carrying, every
rebalance handed each region a fresh allowance: with traffic shares rebalanced every
second, three regions admitted everything they were offered, three times a 6,000/minute
limit.

So the first hit of a key after its local rates changed first carries the key's usage:
for each layer, the units used under the old rates (capacity minus remaining) that the
new state does not already show are charged to the new state, up to what it has left.
"Does not already show" makes the carry idempotent: a second carry of the same usage (a
process whose book was emptied, a retry) charges nothing more.

The old rates are the ones this quota last decided the key on (``CarryBook``) and the
ones of the weights taken before the current ones (for a key this quota has not decided
since, which another process of the region may have): the larger usage of the two counts.

A store names a window algorithm's state without its limit (a window's count goes on when
its limit is edited: ``algorithms.state_suffix``), so a window's state is the same under
every allowance. For the sliding windows, which are not carried, that is the point: the
count goes on over a move. The fixed window is carried (a share, which a count that goes
on would be charged on top of), so a quota over it names each allowance's state apart
(``region_key``: the allowances follow the caller's key), and every move lands on a new
state as a bucket's does; every layer is then carried, those whose rate did not move too.
An edit of its global limit is carried as well, so that its count goes on as a plain
limiter's does: the share used times the old limit's allowance under the current weights
(``Old``), which is the count when only the limit moved.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import Any

from ratewarden.decision import Decision
from ratewarden.limiter import Flow
from ratewarden.rate import Rate

__all__ = [
    "DEFAULT_CARRY_KEYS",
    "NOT_CARRIED",
    "CarryBook",
    "Decided",
    "Old",
    "Scaled",
    "carry_flow",
    "region_key",
]

#: Algorithms whose usage is not carried: a sliding window's estimate weighs the window
#: before, and a sliding log's entries expire at their own times; a carry can only charge
#: the present, so each carry would hold the region's old usage a whole period longer
#: (measured: 41-493 of 6,000 a minute admitted with a carry every second). They need
#: none: a store names their state without the limit, so a key's count goes on under
#: every allowance, and a region whose allowance shrank below it waits for it to age out.
NOT_CARRIED = frozenset({"sliding_window", "sliding_log"})

#: Keys whose last local rates a quota remembers (least recently used forgotten first).
DEFAULT_CARRY_KEYS = 10_000

#: Rate sets remembered a key: a state's usage is read from each when the rates move.
DEFAULT_RATE_SETS = 2

#: A global rate set scaled to one region's allowances: one entry a global rate, None where
#: the allowance is 0.
Scaled = tuple[Rate | None, ...]
#: What a quota decided a key on: the global rates and their ``Scaled`` local rates.
Decided = tuple[tuple[Rate, ...], Scaled]
#: An earlier ``Scaled`` a key was decided on, and per layer the capacity its share used is
#: taken of now: the new local rate's, or, when the global rates were edited since, the old
#: global rate's allowance under the current weights (so an edit keeps the count, a move of
#: the weights keeps the share).
Old = tuple[Scaled, tuple[int, ...]]


def region_key(key: str, scaled: Scaled, apart: bool) -> str:
    """The key a quota decides ``key`` by under the local rates ``scaled``: ``key`` itself,
    or, with ``apart`` (the fixed window, carried, whose store state does not name the
    limit), ``key`` and the allowances (``tenant@allowance:600,20``; 0 for an allowance of
    none), so that each allowance counts apart."""
    if not apart:
        return key
    return f"{key}@allowance:{','.join(str(0 if r is None else r.limit) for r in scaled)}"


class CarryBook:
    """Per key (and global rates), the local rates a quota decided it on lately, newest
    last (at most ``DEFAULT_RATE_SETS`` of them); at most ``max_keys`` keys, least recently
    used forgotten first."""

    __slots__ = ("_last", "_lock", "max_keys")

    def __init__(self, max_keys: int = DEFAULT_CARRY_KEYS) -> None:
        self.max_keys = max_keys
        self._last: OrderedDict[Hashable, tuple[Decided, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def swap(self, ident: Hashable, scaled: Decided) -> tuple[Decided, ...] | None:
        """Record ``scaled`` as ``ident``'s newest rates. None when they are the newest
        already (nothing to carry: the common case); else the others it was decided on
        lately, newest last (empty for a key not seen yet)."""
        known = self._last.get(ident)  # the common case (unchanged) without the lock
        if known is not None and known[-1] == scaled:
            return None
        with self._lock:
            known = self._last.get(ident, ())
            if known and known[-1] == scaled:
                return None
            others = tuple(rates for rates in known if rates != scaled)
            self._last[ident] = (*others[-(DEFAULT_RATE_SETS - 1) :], scaled)
            self._last.move_to_end(ident)
            while len(self._last) > self.max_keys:
                self._last.popitem(last=False)
        return others

    def forget(self, ident: Hashable) -> None:
        """Forget ``ident``'s rates (its carry failed: the next hit carries again)."""
        with self._lock:
            self._last.pop(ident, None)

    def __len__(self) -> int:
        return len(self._last)


def _layers(decision: Decision) -> tuple[Decision, ...]:
    return decision.layers or (decision,)


def carry_flow(
    limiter: Any, key: str, olds: Sequence[Old], new: Sequence[Rate], apart: bool = False
) -> Flow[bool]:
    """Charge ``key``'s state under ``new`` with the share of its capacity it had used under
    ``olds`` (each aligned with ``new``, layer by layer; the share times the old's capacity
    for it, the largest counting) that it does not show yet, as a flow of ``limiter`` (a
    ``Limiter`` or ``AsyncLimiter``: its peeks and hits). ``apart``: each allowance's state
    is named apart (``region_key``). False when the limiter's failure mode answered a step
    for the store (the carry is not made: what it read or charged was not the store's)."""
    used = [Fraction(0)] * len(new)
    into = region_key(key, tuple(new), apart)
    for old, scale in olds:
        source = region_key(key, old, apart)
        moved = source != into  # every layer's state is another then
        layers = [i for i, rate in enumerate(old) if rate is not None and (moved or rate != new[i])]
        if not layers:
            continue
        peek = yield from limiter.peek_flow(source, [old[i] for i in layers])
        if peek.degraded:
            return False
        for i, layer in zip(layers, _layers(peek), strict=True):
            rate = old[i]
            assert rate is not None
            share = Fraction(rate.capacity - layer.remaining, rate.capacity)
            used[i] = max(used[i], share * scale[i])
    wanted = [i for i, units in enumerate(used) if units > 0]
    if not wanted:
        return True
    peek = yield from limiter.peek_flow(into, [new[i] for i in wanted])
    if peek.degraded:
        return False
    for i, layer in zip(wanted, _layers(peek), strict=True):
        capacity = new[i].capacity
        units = min(math.ceil(used[i]) - (capacity - layer.remaining), layer.remaining)
        if units > 0:
            charged = yield from limiter.hit_flow(into, new[i], units)
            if charged.degraded:
                return False
    return True
