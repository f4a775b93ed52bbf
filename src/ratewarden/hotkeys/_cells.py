"""CellLimiter / AsyncCellLimiter: a hot key decided on N cells, each with 1/N of its rates.

Placement and shares are in ``_placement``. A request goes to the cell the
picker chooses; a denial there retries the next cell once; a denial by both is
remembered until the sooner of their retry times and answered in the process
until then. The decision is written once (``_CellBase._hit_flow``) and driven by
the twin shells.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace

from ratewarden import algorithms
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys._flows import Flow, adrive, drive
from ratewarden.hotkeys._placement import cell_keys, check_cells, slot_bands, split_rate
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.checks import check_cost, check_rates
from ratewarden.limiter import DEFAULT_NEGATIVE_KEYS, NegativeCache

__all__ = ["AsyncCellLimiter", "CellLimiter", "Picker", "round_robin"]

#: Chooses a cell: given N, an index in ``range(N)``.
Picker = Callable[[int], int]
#: Placements and shares remembered (one per hot key and rate set).
_CACHE_SIZE = 1024

_Shares = tuple[tuple[Rate, ...], ...]


def round_robin() -> Picker:
    """A picker that takes the cells in turn (shared by threads; ``next`` on a count is atomic)."""
    counter = itertools.count()
    return lambda cells: next(counter) % cells


def _later(seconds: float, elapsed: float) -> float:
    return seconds if math.isinf(seconds) else max(0.0, seconds - elapsed)


class _CellBase:
    """Settings, placement and shares, the negative cache, and the flows; everything but I/O."""

    def __init__(
        self,
        clock: Clock,
        cells: int,
        algorithm: str,
        picker: Picker | None,
        bands: Sequence[tuple[int, int]] | None,
        negative_cache: int | None,
    ) -> None:
        self.clock = clock
        self.cells = check_cells(cells)
        self.algorithm: str = algorithms.get(algorithm).NAME
        if picker is not None and not callable(picker):
            raise ConfigurationError(f"cell picker {picker!r} must be callable: cells -> index")
        self.picker: Picker = picker if picker is not None else round_robin()
        self.bands = None if bands is None else slot_bands(self.cells, bands)
        self.negative = None if negative_cache is None else NegativeCache(negative_cache)
        self._lock = threading.Lock()
        self._keys: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._shares: OrderedDict[tuple[Rate, ...], _Shares] = OrderedDict()

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

    def shares(self, rates: Rate | Sequence[Rate]) -> _Shares:
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

    # -- the flows: each yields (key, rates, cost) per store call

    def _hit_flow(self, key: str, rates: Rate | Sequence[Rate], cost: int) -> Flow[Decision]:
        check_cost(cost)
        keys, shares = self.keys(key), self.shares(rates)
        ident = (key, shares)
        negative = self.negative
        if negative is not None and cost:
            cached = self._cached(negative, ident, cost)
            if cached is not None:
                return cached
        first = self._pick()
        decision = yield keys[first], shares[first], cost
        if decision.allowed or cost == 0:
            return decision
        second = (first + 1) % self.cells
        retried = yield keys[second], shares[second], cost
        if retried.allowed:
            return retried
        sooner = retried if retried.retry_after <= decision.retry_after else decision
        if negative is not None:
            negative.remember(ident, sooner, self.clock.now_us())
        return sooner

    def _used_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[int]:
        """Units in use over all cells, for the layer with the most in use (a peek per cell)."""
        keys, shares = self.keys(key), self.shares(rates)
        per_layer: list[int] = []
        for cell_key, share in zip(keys, shares, strict=True):
            peek = yield cell_key, share, 0
            layers = peek.layers or (peek,)
            used = [layer.rate.capacity - layer.remaining for layer in layers if layer.rate]
            per_layer = (
                used if not per_layer else [a + b for a, b in zip(per_layer, used, strict=True)]
            )
        return max(per_layer, default=0)

    def _charge_flow(self, key: str, rates: Rate | Sequence[Rate], units: int) -> Flow[None]:
        """``units`` spread over the cells by capacity, rounded up; a full cell takes what fits."""
        check_cost(units)
        keys, shares = self.keys(key), self.shares(rates)
        total = min(sum(rate.capacity for rate in share) for share in zip(*shares, strict=True))
        for cell_key, share in zip(keys, shares, strict=True):
            capacity = min(rate.capacity for rate in share)
            part = min(capacity, -(-units * capacity // total))
            if part == 0:
                continue
            charged = yield cell_key, share, part
            if not charged.allowed:
                room = (yield cell_key, share, 0).remaining
                if room > 0:
                    yield cell_key, share, min(room, part)

    def _cached(
        self, negative: NegativeCache, ident: tuple[str, _Shares], cost: int
    ) -> Decision | None:
        """A remembered double denial that still holds for ``cost``, its times aged to now."""
        now = self.clock.now_us()
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
            refill_after=_later(d.refill_after, elapsed),
        )

    def _pick(self) -> int:
        index = self.picker(self.cells)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.cells:
            raise ConfigurationError(
                f"cell picker returned {index!r}; it must return an index in range({self.cells})"
            )
        return index


class CellLimiter(_CellBase):
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
        self.store: Store = store
        super().__init__(store.clock, cells, algorithm, picker, bands, negative_cache)

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Consume ``cost`` on one cell; a denial retries the next cell once before denying."""
        return drive(self.store, self.algorithm, self._hit_flow(key, rates, cost))

    def used(self, key: str, rates: Rate | Sequence[Rate]) -> int:
        """Units in use over all cells, for the layer with the most in use (one peek per cell)."""
        return drive(self.store, self.algorithm, self._used_flow(key, rates))

    def charge(self, key: str, rates: Rate | Sequence[Rate], units: int) -> None:
        """Mark ``units`` as used, spread over the cells by capacity (rounded up: never fewer).

        A cell that cannot take its part is charged what it has room for: it
        is that much closer to its limit already.
        """
        drive(self.store, self.algorithm, self._charge_flow(key, rates, units))

    def __repr__(self) -> str:
        return f"CellLimiter({self.store!r}, cells={self.cells}, algorithm={self.algorithm!r})"


class AsyncCellLimiter(_CellBase):
    """The asyncio twin of ``CellLimiter`` over an ``AsyncStore``; the same options."""

    def __init__(
        self,
        store: AsyncStore,
        cells: int = 3,
        algorithm: str = "gcra",
        *,
        picker: Picker | None = None,
        bands: Sequence[tuple[int, int]] | None = None,
        negative_cache: int | None = DEFAULT_NEGATIVE_KEYS,
    ) -> None:
        self.store: AsyncStore = store
        super().__init__(store.clock, cells, algorithm, picker, bands, negative_cache)

    async def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """See ``CellLimiter.hit``."""
        return await adrive(self.store, self.algorithm, self._hit_flow(key, rates, cost))

    async def used(self, key: str, rates: Rate | Sequence[Rate]) -> int:
        """See ``CellLimiter.used``."""
        return await adrive(self.store, self.algorithm, self._used_flow(key, rates))

    async def charge(self, key: str, rates: Rate | Sequence[Rate], units: int) -> None:
        """See ``CellLimiter.charge``."""
        await adrive(self.store, self.algorithm, self._charge_flow(key, rates, units))

    def __repr__(self) -> str:
        return f"AsyncCellLimiter({self.store!r}, cells={self.cells}, algorithm={self.algorithm!r})"
