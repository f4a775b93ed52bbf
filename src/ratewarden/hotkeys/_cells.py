"""Cells: one hot key split into N keys on different Cluster slots, each with 1/N of the rate.

Placement. Cell ``i`` of key ``k`` is the key ``k~cell:i:s``, where the salt
``s`` is the smallest number that puts the cell's hash slot in the middle half
of band ``i`` (by default the slots cut into N equal bands; a Cluster created
by ``redis-cli --cluster create`` gives each primary one such band when N is a
multiple of the primary count). The store uses the whole key as its hash tag,
so the slot is CRC16 of the escaped cell key, computed here exactly as Redis
does (``CLUSTER KEYSLOT`` agrees; the tests check it). A placement depends
only on the key, N and the bands: every process finds the same cells.

Shares. Each rate of ``limit`` L and capacity C is split with
``L // N`` (plus one for the first ``L % N`` cells) and likewise for C, so the
cells' limits add up to L and their capacities to C exactly: the cells together
never admit more than the key would have. What splitting costs is the
fragmentation error: a request is denied when the cell it picked and the one it
retries are both short, while the other N - 2 cells may still have room
(docs/scaling.md gives the bound and the measured figures).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace

from ratewarden import algorithms
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import Store
from ratewarden.storage._keys import escape
from ratewarden.storage._plan import check_cost, check_key, check_rates
from ratewarden.tiers import NegativeCache
from ratewarden.tiers._negative import DEFAULT_NEGATIVE_KEYS

__all__ = ["SLOTS", "CellLimiter", "Picker", "cell_keys", "key_slot", "round_robin", "split_rate"]

#: Hash slots of a Redis Cluster.
SLOTS = 16384
#: The most cells one key may be split into.
MAX_CELLS = 256
#: Placements and shares remembered (one per hot key and rate set).
_CACHE_SIZE = 1024

#: Chooses a cell: given N, an index in ``range(N)``.
Picker = Callable[[int], int]


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def key_slot(tag: str) -> int:
    """The Cluster hash slot of a store key whose hash tag is ``tag`` (CRC16/XMODEM mod 16384)."""
    crc = 0
    for byte in tag.encode():
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ byte) & 0xFF]
    return crc % SLOTS


def _check_cells(cells: object) -> int:
    if isinstance(cells, bool) or not isinstance(cells, int) or not 2 <= cells <= MAX_CELLS:
        raise ConfigurationError(
            f"cells {cells!r} must be a whole number from 2 to {MAX_CELLS} "
            "(3 or more spread a key over 3 primaries)"
        )
    return cells


def _bands(cells: int, bands: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    if bands is None:
        return [(i * SLOTS // cells, (i + 1) * SLOTS // cells) for i in range(cells)]
    found = list(bands)
    if not found:
        raise ConfigurationError("cell bands must name at least one slot range (start, end)")
    for band in found:
        ok = isinstance(band, tuple) and len(band) == 2
        if not ok or not all(type(b) is int for b in band) or not 0 <= band[0] < band[1] <= SLOTS:
            raise ConfigurationError(
                f"cell band {band!r} must be (start, end) slots with 0 <= start < end <= {SLOTS}"
            )
    return [found[i % len(found)] for i in range(cells)]


def cell_keys(
    key: str, cells: int, bands: Sequence[tuple[int, int]] | None = None
) -> tuple[str, ...]:
    """The ``cells`` keys that stand for ``key``, cell ``i`` in the middle of slot band ``i``.

    ``bands`` are ``(start, end)`` slot ranges, one per primary for instance
    (from ``CLUSTER SHARDS``); cell ``i`` goes to ``bands[i % len(bands)]``.
    By default the 16,384 slots are cut into ``cells`` equal bands.
    """
    check_key(key)
    cells = _check_cells(cells)
    found = []
    for i, (start, end) in enumerate(_bands(cells, bands)):
        width = end - start
        low, high = start + width // 4, end - width // 4
        if high <= low:
            low, high = start, end
        for salt in itertools.count():
            name = f"{key}~cell:{i}:{salt}"
            if low <= key_slot(escape(name)) < high:
                found.append(name)
                break
    return tuple(found)


def split_rate(rate: Rate, cells: int) -> tuple[Rate, ...]:
    """``rate`` cut into ``cells`` shares whose limits and capacities add up to the rate's exactly.

    Raises ``ConfigurationError`` when a share would be empty (more cells than
    the limit or the capacity).
    """
    cells = _check_cells(cells)
    if cells > rate.limit or cells > rate.capacity:
        raise ConfigurationError(
            f"cannot split {rate} into {cells} cells: each cell needs a limit and a burst of "
            f"at least 1; use at most {min(rate.limit, rate.capacity)} cells for this rate"
        )
    shares = []
    for i in range(cells):
        limit = rate.limit // cells + (i < rate.limit % cells)
        burst = None
        if rate.burst is not None:
            burst = rate.burst // cells + (i < rate.burst % cells)
        shares.append(Rate(limit, rate.period, burst))
    return tuple(shares)


def _later(seconds: float, elapsed: float) -> float:
    return seconds if math.isinf(seconds) else max(0.0, seconds - elapsed)


def round_robin() -> Picker:
    """A picker that takes the cells in turn (shared by threads; ``next`` on a count is atomic)."""
    counter = itertools.count()
    return lambda cells: next(counter) % cells


class CellLimiter:
    """``hit(key, rates, cost)`` on a key split into ``cells`` cells over a ``Store``.

    Each request goes to the cell ``picker`` chooses (round-robin by default;
    pass ``lambda n: random.randrange(n)`` for random); when that cell denies,
    the next cell is tried once before the request is denied. ``bands`` places
    the cells (see ``cell_keys``). The Decision is the deciding cell's: its
    ``limit`` and ``remaining`` are that cell's share.

    A request both cells denied is remembered until the sooner of their retry
    times (``negative_cache`` keys, least recently used dropped; None turns it
    off): until then neither cell can have a unit, so the key is denied here
    without a store call. Far over its limit, this is what keeps a hot key's
    denials from costing two commands each.
    """

    def __init__(
        self,
        store: Store,
        cells: int = 3,
        algorithm: str = "gcra",
        *,
        picker: Picker | None = None,
        bands: Sequence[tuple[int, int]] | None = None,
        negative_cache: int | None = DEFAULT_NEGATIVE_KEYS,
    ) -> None:
        self.store = store
        self.cells = _check_cells(cells)
        self.algorithm: str = algorithms.get(algorithm).NAME
        if picker is not None and not callable(picker):
            raise ConfigurationError(f"cell picker {picker!r} must be callable: cells -> index")
        self.picker: Picker = picker if picker is not None else round_robin()
        self.bands = None if bands is None else _bands(self.cells, bands)
        self.negative = None if negative_cache is None else NegativeCache(negative_cache)
        self._lock = threading.Lock()
        self._keys: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._shares: OrderedDict[tuple[Rate, ...], tuple[tuple[Rate, ...], ...]] = OrderedDict()

    def keys(self, key: str) -> tuple[str, ...]:
        """The cell keys of ``key`` (computed once, then remembered)."""
        with self._lock:
            found = self._keys.get(key)
        if found is None:
            found = cell_keys(key, self.cells, self.bands)
            with self._lock:
                self._keys[key] = found
                if len(self._keys) > _CACHE_SIZE:
                    self._keys.popitem(last=False)
        return found

    def shares(self, rates: Rate | Sequence[Rate]) -> tuple[tuple[Rate, ...], ...]:
        """Per cell, its share of every rate (validated once per rate set)."""
        found_rates = check_rates(rates)
        with self._lock:
            found = self._shares.get(found_rates)
        if found is None:
            per_rate = [split_rate(rate, self.cells) for rate in found_rates]
            found = tuple(tuple(split[i] for split in per_rate) for i in range(self.cells))
            with self._lock:
                self._shares[found_rates] = found
                if len(self._shares) > _CACHE_SIZE:
                    self._shares.popitem(last=False)
        return found

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Consume ``cost`` on one cell; a denial retries the next cell once before denying."""
        check_cost(cost)
        keys, shares = self.keys(key), self.shares(rates)
        ident = (key, shares)
        negative = self.negative
        if negative is not None and cost:
            cached = self._cached(negative, ident, cost)
            if cached is not None:
                return cached
        first = self._pick()
        decision = self.store.hit(self.algorithm, keys[first], shares[first], cost)
        if decision.allowed or cost == 0:
            return decision
        second = (first + 1) % self.cells
        retried = self.store.hit(self.algorithm, keys[second], shares[second], cost)
        if retried.allowed:
            return retried
        sooner = retried if retried.retry_after <= decision.retry_after else decision
        if negative is not None:
            negative.remember(ident, sooner, self.store.clock.now_us())
        return sooner

    def _cached(
        self, negative: NegativeCache, ident: tuple[str, object], cost: int
    ) -> Decision | None:
        """A remembered double denial that still holds for ``cost``, its times aged to now."""
        now = self.store.clock.now_us()
        denial = negative.lookup(ident, cost, now)
        if denial is None:
            return None
        elapsed = (now - denial.at_us) / 1_000_000
        d = denial.decision
        return replace(
            d,
            cost=cost,
            retry_after=_later(d.retry_after, elapsed),
            reset_after=_later(d.reset_after, elapsed),
        )

    def used(self, key: str, rates: Rate | Sequence[Rate]) -> int:
        """Units in use over all cells, for the layer with the most in use (one peek per cell)."""
        keys, shares = self.keys(key), self.shares(rates)
        per_layer: list[int] = []
        for cell_key, share in zip(keys, shares, strict=True):
            peek = self.store.hit(self.algorithm, cell_key, share, 0)
            layers = peek.layers or (peek,)
            used = [layer.rate.capacity - layer.remaining for layer in layers if layer.rate]
            per_layer = (
                used if not per_layer else [a + b for a, b in zip(per_layer, used, strict=True)]
            )
        return max(per_layer, default=0)

    def charge(self, key: str, rates: Rate | Sequence[Rate], units: int) -> None:
        """Mark ``units`` as used, spread over the cells by capacity (rounded up: never fewer).

        A cell that cannot take its part is charged what it has room for: it
        is that much closer to its limit already.
        """
        check_cost(units)
        keys, shares = self.keys(key), self.shares(rates)
        total = min(sum(rate.capacity for rate in share) for share in zip(*shares, strict=True))
        for cell_key, share in zip(keys, shares, strict=True):
            capacity = min(rate.capacity for rate in share)
            part = min(capacity, -(-units * capacity // total)) if total else 0
            if part and not self.store.hit(self.algorithm, cell_key, share, part).allowed:
                room = self.store.hit(self.algorithm, cell_key, share, 0).remaining
                if room > 0:
                    self.store.hit(self.algorithm, cell_key, share, min(room, part))

    def _pick(self) -> int:
        index = self.picker(self.cells)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.cells:
            raise ConfigurationError(
                f"cell picker returned {index!r}; it must return an index in range({self.cells})"
            )
        return index

    def __repr__(self) -> str:
        return f"CellLimiter({self.store!r}, cells={self.cells}, algorithm={self.algorithm!r})"
