"""CellLimiter / AsyncCellLimiter: a hot key decided on N cells, each with 1/N of its rates.

Placement and shares are in ``_placement``. A request goes to the cell the
picker chooses; a denial there retries the next cell once; a denial by both is
remembered until the sooner of their retry times and answered in the process
until then. Each cell's decision is the limiter's (``hit_flow`` on the cell's
key and share); the cell logic is written once as flows composed from it
(``_CellBase``), and the twin shells' methods are made of them (``blocking`` /
``awaiting``).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ratewarden.checks import check_cost, check_key, check_rates, keywords_checked
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys._carry import charge_layers_flow, usage
from ratewarden.hotkeys._placement import cell_keys, check_bands, check_cells, split_rate
from ratewarden.limiter import (
    DEFAULT_NEGATIVE_KEYS,
    AsyncLimiter,
    FailureHook,
    Flow,
    Limiter,
    NegativeCache,
    aged,
    awaiting,
    blocking,
    check_failure_mode,
)
from ratewarden.rate import Rate

if TYPE_CHECKING:
    # Named as strings in the shells' bases (types only: hotkeys import no store).
    from ratewarden.storage import AsyncStore, Store  # noqa: F401

__all__ = ["AsyncCellLimiter", "CellLimiter", "Picker", "built_over", "round_robin"]

#: Chooses a cell: given N, an index in ``range(N)``.
Picker = Callable[[int], int]
#: Placements and shares remembered (one per hot key and rate set).
_CACHE_SIZE = 1024

_Shares = tuple[tuple[Rate, ...], ...]

#: The store a shell takes (``Store`` or ``AsyncStore``) and the limiter it builds over it.
S = TypeVar("S")
L = TypeVar("L", bound=Limiter | AsyncLimiter)
T = TypeVar("T")


def _shadowed(decision: Decision, shadow: bool) -> Decision:
    """``decision``, a denial reported as allowed and shadowed when ``shadow`` (as the
    limiter's own hit reports one)."""
    if shadow and not decision.allowed:
        return replace(decision, allowed=True, shadowed=True)
    return decision


def built_over(owner: type, store: object, algorithm: str) -> Any:
    """``owner._driver(store, algorithm)``, the plain limiter a shell decides through; its
    refusal of ``store`` (of the other twin, or no store) said by ``owner``, the class the
    caller built, naming its own twin: the caller never built a ``Limiter``."""
    driver: Any = owner._driver  # type: ignore[attr-defined]
    try:
        return driver(store, algorithm)
    except ConfigurationError as error:
        said = str(error)
        if not said.startswith(f"{driver.__name__}: "):
            raise
        name = owner.__name__
        mine, other = (
            ("asyncio", "blocking") if name.startswith("Async") else ("blocking", "asyncio")
        )
        twin = name.removeprefix("Async") if mine == "asyncio" else f"Async{name}"
        said = said.removeprefix(f"{driver.__name__}: ")
        said = said.replace(f"the {mine} twin", name).replace(f"the {other} twin", twin)
        raise ConfigurationError(f"{name}: {said}") from None


def round_robin() -> Picker:
    """A picker that takes the cells in turn (shared by threads; ``next`` on a count is atomic)."""
    counter = itertools.count()
    return lambda cells: next(counter) % cells


class _CellBase(Generic[S, L]):
    """Placement and shares, the cache of double denials, and the flows; everything but I/O.

    ``limiter`` (a plain ``_driver(store, algorithm)``: ``Limiter`` or ``AsyncLimiter``)
    decides each cell; the flows here compose its ``hit_flow`` and ``peek_flow``.
    """

    #: ``Limiter`` or ``AsyncLimiter``: what the shell builds over its store.
    _driver: ClassVar[Callable[..., Any]]

    @keywords_checked
    def __init__(
        self,
        store: S,
        cells: int = 3,
        algorithm: str = "gcra",
        *,
        picker: Picker | None = None,
        bands: Sequence[tuple[int, int]] | None = None,
        negative_cache: int | NegativeCache | None = DEFAULT_NEGATIVE_KEYS,
    ) -> None:
        if store is None:  # a limiter's None is a MemoryStore: cells would split one process
            raise ConfigurationError(
                f"{type(self).__name__} needs the store the fleet shares (a Redis Cluster's "
                "RedisStore); for one process, pass a MemoryStore() yourself"
            )
        self.store: S = store
        self.limiter: L = built_over(type(self), store, algorithm)
        limiter = self.limiter
        self.clock = limiter.clock
        self.cells = check_cells(cells)
        self.algorithm: str = limiter.algorithm
        if picker is not None and not callable(picker):
            raise ConfigurationError(f"cell picker {picker!r} must be callable: cells -> index")
        self.picker: Picker = picker if picker is not None else round_robin()
        # The bands as given (checked), not one per cell: ``cell_keys`` takes them in turn,
        # and with more cells than bands the per-cell list is out of slot order.
        self.bands = None if bands is None else check_bands(bands)
        # A NegativeCache as given (its max_hold too), as a Limiter or a TwoTier takes one.
        if isinstance(negative_cache, NegativeCache) or negative_cache is None:
            self.negative = negative_cache
        else:
            self.negative = NegativeCache(negative_cache)
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

    def run(self, flow: Flow[T]) -> Any:
        """Drive ``flow`` (one of the ``*_flow`` methods, or a composition of them) on
        ``limiter``: ``limiter.run(flow)``, to be awaited on the asyncio twin."""
        return self.limiter.run(flow)

    # -- the flows, composed from the limiter's

    def hit_flow(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        shadow: bool = False,
        failure_mode: str | None = None,
        on_failure: FailureHook | None = None,
    ) -> Flow[Decision]:
        """Consume ``cost`` on one cell; a denial retries the next cell once before denying.

        The keywords are ``Limiter.hit``'s. ``failure_mode`` and ``on_failure`` go with
        each cell's hit (the failure mode answers for a cell whose store call failed,
        and a denial it answers is tried on the next cell like any other). ``shadow``
        is the key's: the denial of both cells (or a cached one) is reported as
        ``allowed=True, shadowed=True``; a cell's denial alone still goes to the next.
        """
        check_cost(cost)
        check_failure_mode(failure_mode, none_ok=True)
        keys, shares = self.keys(key), self.shares(rates)
        ident = (key, shares)
        negative = self.negative
        if negative is not None and cost:
            now = self.clock.now_us()
            denial = negative.lookup(ident, cost, now)
            if denial is not None:
                # Neither cell can have a unit before then: the core's aging, as for its own
                # negative cache.
                return _shadowed(aged(denial.decision, now - denial.at_us, cost), shadow)
        core = self.limiter
        first = self._pick()
        decision = yield from core.hit_flow(
            keys[first], shares[first], cost, failure_mode=failure_mode, on_failure=on_failure
        )
        if decision.allowed or cost == 0:
            return _shadowed(decision, shadow)
        second = (first + 1) % self.cells
        retried = yield from core.hit_flow(
            keys[second], shares[second], cost, failure_mode=failure_mode, on_failure=on_failure
        )
        if retried.allowed:
            return retried
        sooner = retried if retried.retry_after <= decision.retry_after else decision
        # A failure mode's denial says nothing of the cells' state: never remembered.
        if negative is not None and not (decision.degraded or retried.degraded):
            negative.remember(ident, sooner, self.clock.now_us())
        return _shadowed(sooner, shadow)

    def usage_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[tuple[int, ...]]:
        """Per layer of ``rates``, the units in use over all cells (one peek per cell)."""
        keys, shares = self.keys(key), self.shares(rates)
        total = [0] * len(shares[0])
        for cell_key, share in zip(keys, shares, strict=True):
            peek = yield from self.limiter.peek_flow(cell_key, share)
            total = [a + b for a, b in zip(total, usage(peek, share), strict=True)]
        return tuple(total)

    def used_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[int]:
        """Units in use over all cells, for the layer with the most in use (one peek per cell)."""
        return max((yield from self.usage_flow(key, rates)))

    def charge_flow(
        self, key: str, rates: Rate | Sequence[Rate], units: int | Sequence[int]
    ) -> Flow[None]:
        """Mark ``units`` as used, spread over the cells by capacity (rounded up: never fewer).

        ``units`` is a count for every layer of ``rates``, or one count per layer
        (in the order of ``rates``): each layer is charged its own, so a layered
        key's wider layers keep their usage. A cell's layer that cannot take its
        part is charged what it has room for, and the rest goes to the cells with
        room, in turn: the cells together take every unit (a full cell's part
        dropped would leave the others a fresh allowance), or are all full.
        """
        found = check_rates(rates)
        wanted = _per_layer(units, found)
        keys, shares = self.keys(key), self.shares(found)
        short = [0] * len(found)
        for cell_key, share in zip(keys, shares, strict=True):
            parts = [
                min(part.capacity, -(-want * part.capacity // whole.capacity))
                for part, whole, want in zip(share, found, wanted, strict=True)
            ]
            took = yield from charge_layers_flow(self.limiter, cell_key, share, parts)
            short = [s + p - t for s, p, t in zip(short, parts, took, strict=True)]
        for cell_key, share in zip(keys, shares, strict=True):
            if not any(short):
                break
            took = yield from charge_layers_flow(self.limiter, cell_key, share, short)
            short = [s - t for s, t in zip(short, took, strict=True)]

    def reset_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[None]:
        """Forget ``key``'s usage on every cell, and the denial this process remembers for it
        (what support does to lift a block; one reset per cell)."""
        check_key(key)
        keys, shares = self.keys(key), self.shares(rates)
        if self.negative is not None:
            self.negative.forget((key, shares))
        for cell_key, share in zip(keys, shares, strict=True):
            yield from self.limiter.reset_flow(cell_key, share)

    def _pick(self) -> int:
        index = self.picker(self.cells)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.cells:
            raise ConfigurationError(
                f"cell picker returned {index!r}; it must return an index in range({self.cells})"
            )
        return index

    def _describe(self) -> str:
        name = type(self).__name__
        store = self.store
        return f"{name}({store!r}, cells={self.cells}, algorithm={self.algorithm!r})"

    def __repr__(self) -> str:
        return self._describe()


class CellLimiter(_CellBase["Store", Limiter]):
    """``hit(key, rates, cost)`` on a key split into ``cells`` cells over a ``Store`` (with
    ``Limiter.hit``'s keywords: ``shadow``, ``failure_mode``, ``on_failure``; see ``hit_flow``).

    Each request goes to the cell ``picker`` chooses (round-robin by default;
    pass ``lambda n: random.randrange(n)`` for random); when that cell denies,
    the next cell is tried once before the request is denied. ``bands`` places
    the cells (see ``cell_keys``; more cells than bands take them in turn):
    ``read_slot_map(store).bands`` puts them on a Cluster's primaries as its live
    slot map has them. The Decision is the deciding cell's: its ``limit`` and
    ``remaining`` are that cell's share.

    A request both cells denied is remembered until the sooner of their retry
    times (``negative_cache`` keys, least recently used dropped; None turns it
    off; or a ``NegativeCache``, with its ``max_hold``): until then neither cell
    can have a unit, so the key is denied here without a store call. Far over
    its limit, this is what keeps a hot key's denials from costing two commands
    each.

    The cells are decided by ``limiter``, a ``Limiter(store, algorithm)`` made here.
    """

    _driver = Limiter
    hit = blocking(_CellBase.hit_flow)
    used = blocking(_CellBase.used_flow)
    usage = blocking(_CellBase.usage_flow)
    charge = blocking(_CellBase.charge_flow)
    reset = blocking(_CellBase.reset_flow)


class AsyncCellLimiter(_CellBase["AsyncStore", AsyncLimiter]):
    """The asyncio twin of ``CellLimiter`` over an ``AsyncStore``; the same options."""

    _driver = AsyncLimiter
    hit = awaiting(_CellBase.hit_flow)
    used = awaiting(_CellBase.used_flow)
    usage = awaiting(_CellBase.usage_flow)
    charge = awaiting(_CellBase.charge_flow)
    reset = awaiting(_CellBase.reset_flow)


def _per_layer(units: int | Sequence[int], rates: tuple[Rate, ...]) -> tuple[int, ...]:
    """``units`` as one count per layer of ``rates``, each checked as a cost."""
    if isinstance(units, int):
        return (check_cost(units),) * len(rates)
    if not isinstance(units, Sequence) or isinstance(units, str | bytes):
        raise ConfigurationError(f"units {units!r} must be a whole number or one per rate")
    if len(units) != len(rates):
        raise ConfigurationError(
            f"units {list(units)!r}: one count per rate is {len(rates)}, got {len(units)}"
        )
    return tuple(check_cost(part) for part in units)
