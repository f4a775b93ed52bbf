"""HotKeyLimiter / AsyncHotKeyLimiter: ordinary keys on the store, hot ones through a mitigation.

A key is hot when it is configured so (``hot_keys``, the same list in every
process) or when this process's ``HotKeyDetector`` reports it. A hot key is
decided by the mitigation, one of:

- cells (``CellLimiter``): the key's state lives in N cells on N slot bands.
  Moving a key onto cells carries its usage over (a peek of the key, then that
  many units charged across the cells), and moving it back carries the cells'
  usage to the key, so a switch frees no units in this process. Processes that
  disagree about a key (one on cells, one not) each enforce the whole limit on
  different state: configure cells fleet-wide, or detect automatically only in
  one process (docs/scaling.md).
- leases (``TwoTier`` with ``lease``): the key keeps its one state on the store
  and this process buys ``k`` units per store call. The state is the same
  either way, so switching in and out is safe in any number of processes; the
  bound is the leases' own, ``processes x (k - 1)``.

A detected key stays hot for ``hold`` seconds after the detector last called it
hot, so a key near the threshold does not flap between the two.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from ratewarden import algorithms
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys._cells import AsyncCellLimiter, CellLimiter, _CellBase
from ratewarden.hotkeys._detector import HotKeyDetector
from ratewarden.hotkeys._flows import Flow, adrive, drive
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.checks import check_cost, check_key, check_rates
from ratewarden.tiers import AsyncTwoTier, TwoTier

__all__ = ["AsyncHotKeyLimiter", "HotKeyLimiter"]

#: Keys that may be hot by detection at once; past it the longest-held one returns to the store.
DEFAULT_MAX_HOT = 1_000

#: A detected key's move: into the mitigation (True) or out, with the rates it was moved with.
_Move = tuple[bool, str, tuple[Rate, ...]]


class _HotBase:
    """Settings, the hot set, and the flows of moving a key's usage; everything but I/O."""

    def __init__(
        self,
        mitigation: _CellBase | TwoTier | AsyncTwoTier,
        algorithm: str,
        hot_keys: Iterable[str],
        detector: HotKeyDetector | None,
        hold: float | None,
        max_hot: int,
        clock: Clock,
    ) -> None:
        self.algorithm: str = algorithms.get(algorithm).NAME
        if mitigation.algorithm != self.algorithm:
            raise ConfigurationError(
                f"mitigation runs {mitigation.algorithm!r} but the limiter runs "
                f"{self.algorithm!r}: a key must keep one algorithm"
            )
        if isinstance(mitigation, TwoTier | AsyncTwoTier) and mitigation.leases is None:
            raise ConfigurationError(
                "a TwoTier mitigation needs leases (TwoTier(store, lease=k)); without them "
                "every request of the hot key still goes to its one shard"
            )
        self.hot_keys = frozenset(check_key(key) for key in hot_keys)
        if detector is not None and not isinstance(detector, HotKeyDetector):
            raise ConfigurationError(f"detector {detector!r} must be a HotKeyDetector")
        self.detector = detector
        default_hold = 2 * (detector.interval_us if detector else 1_000_000) / 1_000_000
        self.hold_us = _hold_us(default_hold if hold is None else hold)
        if isinstance(max_hot, bool) or not isinstance(max_hot, int) or max_hot < 1:
            raise ConfigurationError(f"max_hot {max_hot!r} must be a whole number >= 1")
        self.max_hot = max_hot
        self.clock = clock
        self._cells = mitigation if isinstance(mitigation, _CellBase) else None
        self._lock = threading.Lock()
        # (key, rates) -> microseconds until it returns to the store; a key's state is per rate
        # set, so each rate set of a key moves (and carries its usage) on its own.
        self._detected: OrderedDict[tuple[str, tuple[Rate, ...]], int] = OrderedDict()

    def is_hot(self, key: str) -> bool:
        """Whether ``key`` is mitigated now (configured, or detected and held)."""
        with self._lock:
            return key in self.hot_keys or any(k == key for k, _ in self._detected)

    def _route(
        self, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> tuple[tuple[Rate, ...], bool, list[_Move]]:
        """Validate; then (the rates, whether ``key`` is hot, the moves to make first)."""
        found = check_rates(rates)
        check_cost(cost)
        check_key(key)
        if key in self.hot_keys:
            return found, True, []
        if self.detector is None:
            return found, False, []
        now = self.clock.now_us()
        hot = self.detector.record(key, cost)
        ident = (key, found)
        with self._lock:
            moves: list[_Move] = [(False, k, r) for k, r in self._expired(now)]
            held = ident in self._detected
            if not held and not hot:
                return found, False, moves
            if not held:
                moves.append((True, key, found))
            if hot:
                self._detected[ident] = now + self.hold_us
                self._detected.move_to_end(ident)
            if len(self._detected) > self.max_hot:
                (gone, gone_rates), _ = self._detected.popitem(last=False)
                moves.append((False, gone, gone_rates))
        return found, True, moves

    def _expired(self, now: int) -> list[tuple[str, tuple[Rate, ...]]]:
        """Pop the keys whose hold ran out. Each refresh moves a key to the end with the
        latest expiry, so the expired ones are at the front: this costs what it pops."""
        done = []
        detected = self._detected
        while detected:
            ident, until = next(iter(detected.items()))
            if until > now:
                break
            del detected[ident]
            done.append(ident)
        return done

    def _move_flow(self, move: _Move) -> Flow[None]:
        """Carry a key's usage between its own state and its cells (nothing to do for leases)."""
        into, key, rates = move
        cells = self._cells
        if cells is None:
            return
        if into:
            peek = yield key, rates, 0
            layers = peek.layers or (peek,)
            used = max(
                (layer.rate.capacity - layer.remaining for layer in layers if layer.rate),
                default=0,
            )
            if used > 0:
                yield from cells._charge_flow(key, rates, used)
            return
        used = yield from cells._used_flow(key, rates)
        if used <= 0:
            return
        room = yield key, rates, 0
        units = min(used, *(layer.remaining for layer in room.layers or (room,)))
        if units > 0:
            yield key, rates, units


class HotKeyLimiter(_HotBase):
    """``hit(key, rates, cost)`` like ``Limiter.hit``, with hot keys sent through ``mitigation``.

    ``mitigation`` is a ``CellLimiter`` or a ``TwoTier`` (with ``lease``) over the
    same store and algorithm. ``hot_keys`` are always mitigated; ``detector``
    (optional) adds keys as they turn hot. ``hold`` is how long (seconds) a
    detected key stays mitigated after it was last seen hot (default 2 x the
    detector's interval); ``max_hot`` bounds the detected set.
    """

    def __init__(
        self,
        store: Store,
        mitigation: CellLimiter | TwoTier,
        algorithm: str = "gcra",
        *,
        hot_keys: Iterable[str] = (),
        detector: HotKeyDetector | None = None,
        hold: float | None = None,
        max_hot: int = DEFAULT_MAX_HOT,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(mitigation, CellLimiter | TwoTier):
            raise ConfigurationError(
                f"mitigation {mitigation!r} must be a CellLimiter or a TwoTier with leases"
            )
        if mitigation.store is not store:
            raise ConfigurationError("the mitigation must use the same store as the HotKeyLimiter")
        self.store: Store = store
        self.mitigation: CellLimiter | TwoTier = mitigation
        super().__init__(
            mitigation, algorithm, hot_keys, detector, hold, max_hot, clock or store.clock
        )

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Decide one request: on the store, or through the mitigation when ``key`` is hot."""
        found, hot, moves = self._route(key, rates, cost)
        for move in moves:
            drive(self.store, self.algorithm, self._move_flow(move))
        if hot:
            return self.mitigation.hit(key, found, cost)
        return self.store.hit(self.algorithm, key, found, cost)

    def __repr__(self) -> str:
        return (
            f"HotKeyLimiter({self.store!r}, mitigation={self.mitigation!r}, "
            f"hot_keys={len(self.hot_keys)}, detector={self.detector!r})"
        )


class AsyncHotKeyLimiter(_HotBase):
    """The asyncio twin of ``HotKeyLimiter``, with an ``AsyncCellLimiter`` or ``AsyncTwoTier``."""

    def __init__(
        self,
        store: AsyncStore,
        mitigation: AsyncCellLimiter | AsyncTwoTier,
        algorithm: str = "gcra",
        *,
        hot_keys: Iterable[str] = (),
        detector: HotKeyDetector | None = None,
        hold: float | None = None,
        max_hot: int = DEFAULT_MAX_HOT,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(mitigation, AsyncCellLimiter | AsyncTwoTier):
            raise ConfigurationError(
                f"mitigation {mitigation!r} must be an AsyncCellLimiter or an AsyncTwoTier "
                "with leases"
            )
        if mitigation.store is not store:
            raise ConfigurationError(
                "the mitigation must use the same store as the AsyncHotKeyLimiter"
            )
        self.store: AsyncStore = store
        self.mitigation: AsyncCellLimiter | AsyncTwoTier = mitigation
        super().__init__(
            mitigation, algorithm, hot_keys, detector, hold, max_hot, clock or store.clock
        )

    async def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """See ``HotKeyLimiter.hit``."""
        found, hot, moves = self._route(key, rates, cost)
        for move in moves:
            await adrive(self.store, self.algorithm, self._move_flow(move))
        if hot:
            return await self.mitigation.hit(key, found, cost)
        return await self.store.hit(self.algorithm, key, found, cost)

    def __repr__(self) -> str:
        return (
            f"AsyncHotKeyLimiter({self.store!r}, mitigation={self.mitigation!r}, "
            f"hot_keys={len(self.hot_keys)}, detector={self.detector!r})"
        )


def _hold_us(hold: object) -> int:
    if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 < hold < math.inf:
        raise ConfigurationError(f"hold {hold!r} must be a positive number of seconds")
    return max(1, math.ceil(hold * 1_000_000))
