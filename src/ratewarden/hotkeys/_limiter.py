"""HotKeyLimiter: ``hit`` on the store for ordinary keys, through a mitigation for hot ones.

A key is hot when it is configured so (``hot_keys``, the same list in every
process) or when this process's ``HotKeyDetector`` reports it. A hot key is
decided by the mitigation, one of:

- a ``CellLimiter``: the key's state lives in N cells on N slot bands. Moving
  a key onto cells carries its usage over (a peek of the key, then that many
  units charged across the cells), and moving it back carries the cells' usage
  to the key, so a switch frees no units in this process. Processes that
  disagree about a key (one on cells, one not) each enforce the whole limit on
  different state: configure cells fleet-wide, or detect automatically only in
  one process (docs/scaling.md).
- a ``TwoTier`` with leases: the key keeps its one state on the store and this
  process buys ``k`` units per store call. The state is the same either way, so
  switching in and out is safe in any number of processes; the bound is the
  leases' own, ``processes x (k - 1)``.

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
from ratewarden.hotkeys._cells import CellLimiter
from ratewarden.hotkeys._detector import HotKeyDetector
from ratewarden.rate import Rate
from ratewarden.storage import Store
from ratewarden.storage._plan import check_cost, check_key, check_rates
from ratewarden.tiers import TwoTier

__all__ = ["HotKeyLimiter"]

#: Keys that may be hot by detection at once; past it the longest-cold one returns to the store.
DEFAULT_MAX_HOT = 1_000


class HotKeyLimiter:
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
        self.store = store
        self.algorithm: str = algorithms.get(algorithm).NAME
        _check_mitigation(mitigation, self.algorithm, store)
        self.mitigation = mitigation
        self.hot_keys = frozenset(check_key(key) for key in hot_keys)
        if detector is not None and not isinstance(detector, HotKeyDetector):
            raise ConfigurationError(f"detector {detector!r} must be a HotKeyDetector")
        self.detector = detector
        default_hold = 2 * (detector.interval_us if detector else 1_000_000) / 1_000_000
        self.hold_us = _hold_us(default_hold if hold is None else hold)
        if isinstance(max_hot, bool) or not isinstance(max_hot, int) or max_hot < 1:
            raise ConfigurationError(f"max_hot {max_hot!r} must be a whole number >= 1")
        self.max_hot = max_hot
        self.clock: Clock = clock if clock is not None else store.clock
        self._lock = threading.Lock()
        # key -> (rates it was moved with, microseconds until it returns to the store)
        self._detected: OrderedDict[str, tuple[tuple[Rate, ...], int]] = OrderedDict()

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Decide one request: on the store, or through the mitigation when ``key`` is hot."""
        found = check_rates(rates)
        check_cost(cost)
        check_key(key)
        if key in self.hot_keys:
            return self.mitigation.hit(key, found, cost)
        if self.detector is not None and self._hot(key, found, cost):
            return self.mitigation.hit(key, found, cost)
        return self.store.hit(self.algorithm, key, found, cost)

    def is_hot(self, key: str) -> bool:
        """Whether ``key`` is mitigated now (configured, or detected and held)."""
        with self._lock:
            return key in self.hot_keys or key in self._detected

    def _hot(self, key: str, rates: tuple[Rate, ...], cost: int) -> bool:
        assert self.detector is not None
        now = self.clock.now_us()
        hot = self.detector.record(key, cost)
        self._expire(now)
        with self._lock:
            held = self._detected.get(key)
            if hot and held is not None:
                self._detected[key] = (held[0], now + self.hold_us)
                self._detected.move_to_end(key)
        if held is not None:
            return True
        if not hot:
            return False
        self._move_in(key, rates)
        with self._lock:
            self._detected[key] = (rates, now + self.hold_us)
            evicted = (
                self._detected.popitem(last=False) if len(self._detected) > self.max_hot else None
            )
        if evicted is not None:
            self._move_out(evicted[0], evicted[1][0])
        return True

    def _expire(self, now: int) -> None:
        """Return detected keys whose hold has run out to the store."""
        with self._lock:
            done = [(k, r) for k, (r, until) in self._detected.items() if until <= now]
            for key, _ in done:
                del self._detected[key]
        for key, rates in done:
            self._move_out(key, rates)

    def _move_in(self, key: str, rates: tuple[Rate, ...]) -> None:
        """The key's usage on the store, charged to its cells (leases share the store's state)."""
        cells = self.mitigation
        if isinstance(cells, CellLimiter):
            peek = self.store.hit(self.algorithm, key, rates, 0)
            layers = peek.layers or (peek,)
            used = max(layer.rate.capacity - layer.remaining for layer in layers if layer.rate)
            if used > 0:
                cells.charge(key, rates, used)

    def _move_out(self, key: str, rates: tuple[Rate, ...]) -> None:
        """The cells' usage, charged back to the key on the store."""
        cells = self.mitigation
        if not isinstance(cells, CellLimiter):
            return
        used = cells.used(key, rates)
        if used <= 0:
            return
        room = self.store.hit(self.algorithm, key, rates, 0)
        units = min(used, *(layer.remaining for layer in room.layers or (room,)))
        if units > 0:
            self.store.hit(self.algorithm, key, rates, units)

    def __repr__(self) -> str:
        return (
            f"HotKeyLimiter({self.store!r}, mitigation={self.mitigation!r}, "
            f"hot_keys={len(self.hot_keys)}, detector={self.detector!r})"
        )


def _check_mitigation(mitigation: object, algorithm: str, store: Store) -> None:
    if not isinstance(mitigation, CellLimiter | TwoTier):
        raise ConfigurationError(
            f"mitigation {mitigation!r} must be a CellLimiter or a TwoTier with leases"
        )
    if isinstance(mitigation, TwoTier) and mitigation.leases is None:
        raise ConfigurationError(
            "a TwoTier mitigation needs leases (TwoTier(store, lease=k)); without them "
            "every request of the hot key still goes to its one shard"
        )
    if mitigation.algorithm != algorithm:
        raise ConfigurationError(
            f"mitigation runs {mitigation.algorithm!r} but the limiter runs {algorithm!r}: "
            "a key must keep one algorithm"
        )
    if mitigation.store is not store:
        raise ConfigurationError("the mitigation must use the same store as the HotKeyLimiter")


def _hold_us(hold: object) -> int:
    if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 < hold < math.inf:
        raise ConfigurationError(f"hold {hold!r} must be a positive number of seconds")
    return max(1, math.ceil(hold * 1_000_000))
