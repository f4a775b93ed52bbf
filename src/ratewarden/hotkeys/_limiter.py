"""HotKeyLimiter / AsyncHotKeyLimiter: ordinary keys on the store, hot ones through a mitigation.

A key is hot when it is configured so (``hot_keys``, the same list in every
process) or when this process's ``HotKeyDetector`` reports it. A hot key is
decided by the mitigation, one of:

- cells (``CellLimiter``): the key's state lives in N cells on N slot bands.
  Moving a key onto cells carries its usage over (a peek of the key, then each
  layer's used units charged to that layer across the cells), and moving it back
  carries the cells' usage to the key, layer by layer, so a switch frees no
  units in this process (``_carry``). A detected key the cells cannot decide (a
  rate with fewer units than cells, or a cost the key could admit but a cell's
  share cannot: ``not_split``) stays on its own state while it is hot, and a
  warning says so once per rate set (``_detected``). Processes that
  disagree about a key (one on cells, one not) each enforce the whole limit on
  different state: configure cells fleet-wide, or detect automatically only in
  one process (docs/scaling.md).
- leases (``TwoTier`` with ``lease``): the key keeps its one state on the store
  and this process buys ``k`` units per store call. The state is the same
  either way, so switching in and out is safe in any number of processes; the
  bound is the leases' own, ``processes x (k - 1)``.

A detected key turns hot above the detector's threshold and leaves only after
its rate has stayed at or below ``exit_ratio`` x the threshold (default 0.5) for
``hold`` seconds: a key hovering near the threshold stays hot rather than
flapping in and out (each move costs store calls).

A move is a few store calls, made on the request that finds it due. When one fails,
the move is not recorded as made: the key's usage stays where it was, the request is
answered by its failure mode (as its own store call would be), and the move is tried
again at the key's next hit. Each move charges what its destination lacks (the usage
less what the destination already shows), so a move tried again after it was partly
made charges nothing twice. Other requests of this process on a key being moved wait
for the move (``_gates``): a hit of theirs on the destination before the charge would
count as carried, and be free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ratewarden.checks import check_cost, check_key, check_rates, keywords_checked
from ratewarden.clock import Clock, check_clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.hotkeys._carry import move_flow
from ratewarden.hotkeys._cells import (
    AsyncCellLimiter,
    CellLimiter,
    L,
    S,
    T,
    _CellBase,
    built_over,
)
from ratewarden.hotkeys._detected import Detected, Move
from ratewarden.hotkeys._detector import HotKeyDetector, exit_ratio_of, hold_us
from ratewarden.hotkeys._gates import Gates, asyncio_gate, thread_gate
from ratewarden.hotkeys._placement import not_split
from ratewarden.limiter import (
    Ask,
    AsyncLimiter,
    DecisionCore,
    FailureHook,
    Flow,
    Limiter,
    awaiting,
    blocking,
    check_failure_mode,
)
from ratewarden.rate import Rate
from ratewarden.tiers import AsyncTwoTier, TwoTier

if TYPE_CHECKING:
    # Named as strings in the shells' bases (types only: hotkeys import no store).
    from ratewarden.storage import AsyncStore, Store  # noqa: F401

__all__ = ["AsyncHotKeyLimiter", "HotKeyLimiter"]

log = logging.getLogger("ratewarden.hotkeys")

#: Keys that may be hot by detection at once; past it the longest-held one returns to the store.
DEFAULT_MAX_HOT = 1_000

#: A detected key stays hot while its rate is above this share of the detector's threshold.
DEFAULT_EXIT_RATIO = 0.5

#: The mitigation a shell takes: cells or a two-tier limiter of its own kind.
M = TypeVar("M", bound="CellLimiter | TwoTier | AsyncCellLimiter | AsyncTwoTier")


def _raising(error: Exception) -> Callable[..., Any]:
    def via(*_: Any) -> Any:
        raise error

    return via


def _araising(error: Exception) -> Callable[..., Any]:
    async def via(*_: Any) -> Any:
        raise error

    return via


class _HotBase(Generic[S, L, M]):
    """Settings, the hot set, and the flows of a decision and of moving a key's usage.

    ``limiter`` (a plain ``_driver(store, algorithm)``: ``Limiter`` or ``AsyncLimiter``)
    decides ordinary keys and carries usage; ``mitigation``'s flows decide hot ones.
    Everything but I/O: the shells' ``hit`` is made of ``hit_flow``.
    """

    #: ``Limiter`` or ``AsyncLimiter``: what the shell builds over its store.
    _driver: ClassVar[Callable[..., Any]]
    #: The classes a mitigation may be: the shell's cells and two-tier limiter.
    _mitigations: ClassVar[tuple[type, type]]
    #: The other twin's name and mitigations, named when given one of those.
    _twin: ClassVar[tuple[str, tuple[type, type]]]
    #: A ``via`` for ``limiter.hit_flow`` that fails with the given error (a plain function;
    #: the asyncio shell's, a coroutine function).
    _failing = staticmethod(_raising)
    #: A move's gate: threads wait at it (the asyncio shell's tasks, at an asyncio one).
    _gate: ClassVar[Callable[[], Any]] = staticmethod(thread_gate)

    @keywords_checked
    def __init__(
        self,
        store: S,
        mitigation: M,
        algorithm: str = "gcra",
        *,
        hot_keys: Iterable[str] = (),
        detector: HotKeyDetector | None = None,
        hold: float | None = None,
        exit_ratio: float = DEFAULT_EXIT_RATIO,
        max_hot: int = DEFAULT_MAX_HOT,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(mitigation, self._mitigations):
            cells, tier = (_a(kind.__name__) for kind in self._mitigations)
            twin, twins = self._twin
            hint = ""
            if isinstance(mitigation, twins):
                kind = "asyncio" if twin.startswith("Async") else "blocking"
                hint = f"; {_a(type(mitigation).__name__)} goes with {twin} (the {kind} twin)"
            raise ConfigurationError(
                f"mitigation {mitigation!r} must be {cells} or {tier} with leases{hint}"
            )
        # The store first: one of the other twin is refused as such, not as "another store".
        limiter = built_over(type(self), store, algorithm)
        if mitigation.store is not store:
            name = type(self).__name__
            raise ConfigurationError(
                f"the mitigation must use the same store as the {name} (the same object: "
                f"{name}(store, {type(mitigation).__name__}(store, ...)))"
            )
        self.store: S = store
        self.mitigation: M = mitigation
        self.limiter: L = limiter
        self.algorithm: str = limiter.algorithm
        if mitigation.algorithm != self.algorithm:
            raise ConfigurationError(
                f"mitigation runs {mitigation.algorithm!r} but the limiter runs "
                f"{self.algorithm!r}: a key must keep one algorithm"
            )
        if isinstance(mitigation, DecisionCore) and mitigation.leases is None:
            raise ConfigurationError(
                "a TwoTier mitigation needs leases (TwoTier(store, lease=k)); without them "
                "every request of the hot key still goes to its one shard"
            )
        if isinstance(hot_keys, str | bytes):
            raise ConfigurationError(
                f"hot_keys={hot_keys!r}: pass a set of keys, not one string "
                "(a string would be read as its characters)"
            )
        if not isinstance(hot_keys, Iterable):
            raise ConfigurationError(
                f"hot_keys={hot_keys!r} must be a set of keys (strings), or () for none"
            )
        self.hot_keys = frozenset(check_key(key) for key in hot_keys)
        if detector is not None and not isinstance(detector, HotKeyDetector):
            raise ConfigurationError(f"detector {detector!r} must be a HotKeyDetector")
        self.detector = detector
        if hold is not None and detector is None:
            raise ConfigurationError(
                f"hold={hold!r} is how long a detected key stays hot, and there is no "
                "detector: give detector=HotKeyDetector(...) too, or leave hold out"
            )
        default_hold = 2 * (detector.interval_us if detector else 1_000_000) / 1_000_000
        self.hold_us = hold_us(default_hold if hold is None else hold)
        self.exit_ratio = exit_ratio_of(exit_ratio)
        if isinstance(max_hot, bool) or not isinstance(max_hot, int) or max_hot < 1:
            raise ConfigurationError(f"max_hot {max_hot!r} must be a whole number >= 1")
        self.max_hot = max_hot
        self.clock = check_clock(type(self).__name__, clock) or limiter.clock
        self._cells = mitigation if isinstance(mitigation, _CellBase) else None
        self._tier = mitigation if isinstance(mitigation, DecisionCore) else None
        self._hot = Detected(self.hold_us, self.max_hot)
        #: The configured keys (with their rate sets) whose own usage this process has
        #: carried onto the cells: a key listed by a deploy keeps what it used this window.
        self._listed: set[tuple[str, tuple[Rate, ...]]] = set()
        #: The moves this process is making now, and the requests they hold.
        self._gates = Gates(type(self)._gate)

    def is_hot(self, key: str) -> bool:
        """Whether ``key`` is mitigated now (configured, or detected and held)."""
        return key in self.hot_keys or self._hot.has(key)

    def run(self, flow: Flow[T]) -> Any:
        """Drive ``flow`` (``hit_flow``, or a composition with it) on ``limiter``:
        ``limiter.run(flow)``, to be awaited on the asyncio twin."""
        return self.limiter.run(flow)

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
        """Decide one request: on the store, or through the mitigation when ``key`` is hot.

        The keywords are ``Limiter.hit``'s, handed to whichever decides: ``shadow``
        reports a denial as ``allowed=True, shadowed=True``; ``failure_mode``
        overrides the deciding limiter's for this call (a ``TwoTier``'s own too) and
        ``on_failure`` reports the failures it answers. A detected key's moves (its
        usage carried onto the cells or back) come first; when the key's own move fails,
        its error is this request's store failure, answered by ``failure_mode`` (raised
        without one), and the move is made at a later hit.
        """
        gates = self._gates
        with gates.lock:  # routed and gated in one step (``_gates``)
            hot, moves, found = self._route(key, rates, cost, failure_mode)
            mine, held = gates.take(moves, (key, found)) if moves or gates.busy() else ((), None)
        failed: StorageError | None = None
        try:
            for move in moves:
                error = yield from self._carry_flow(move)
                if error is not None and move[1] == key and move[2] == found:
                    failed = error
        finally:
            if mine:
                gates.give_back(mine)
        if held is not None:
            # Another request of this process is moving the key: decided once it is moved
            # (or not: a failed move leaves the key where it was).
            yield Ask(held.wait, ())
            hot = key in self.hot_keys or self._hot.mitigates((key, found))
        # The rates as given: stores (and the core) know a rate set they saw by its identity.
        decide: Any = self.limiter
        if failed is not None:
            # Answered as the key's own store call would be when it fails, without asking
            # the store again: the failure mode, its hook, shadow and metrics alike.
            decision: Decision = yield from decide.hit_flow(
                key,
                rates,
                cost,
                shadow=shadow,
                failure_mode=failure_mode,
                on_failure=on_failure,
                via=type(self)._failing(failed),
            )
            return decision
        if hot:
            decide = self._cells if self._cells is not None else self._tier
        decision = yield from decide.hit_flow(
            key, rates, cost, shadow=shadow, failure_mode=failure_mode, on_failure=on_failure
        )
        return decision

    def _route(
        self, key: str, rates: Rate | Sequence[Rate], cost: int, failure_mode: str | None
    ) -> tuple[bool, list[Move], tuple[Rate, ...]]:
        """Validate (before the detector counts anything); then (whether the mitigation
        decides ``key``, the moves to make first, the rate set as checked)."""
        found = check_rates(rates)
        check_cost(cost)
        check_key(key)
        check_failure_mode(failure_mode, none_ok=True)
        if key in self.hot_keys:
            # Its own usage onto the cells, once a process (a move made again charges
            # nothing twice): before, a key listed mid-window got a fresh allowance.
            ident = (key, found)
            if self._cells is None or ident in self._listed:
                return True, [], found
            if len(self._listed) >= self.max_hot:
                self._listed.clear()
            self._listed.add(ident)
            return True, [(True, key, found)], found
        detector = self.detector
        if detector is None:
            return False, [], found
        now = self.clock.now_us()
        rate = detector.record_rate(key, cost)
        unfit = None if self._cells is None else not_split(found, self._cells.cells, cost)
        hot, above_exit = rate > detector.threshold, rate > self.exit_ratio * detector.threshold
        mitigated, moves = self._hot.route((key, found), now, hot, above_exit, unfit)
        if mitigated is None and unfit is not None and self._hot.first_said(found):
            log.warning(
                "%s: hot key %r stays on its own state, not on %d cells: %s; use fewer "
                "cells, or leases, for such keys (said once per rate set)",
                type(self).__name__,
                key,
                self._cells.cells if self._cells is not None else 0,
                unfit,
            )
        return bool(mitigated), moves, found

    def _carry_flow(self, move: Move) -> Flow[StorageError | None]:
        """Make ``move``; None, or the store's error that stopped it (the move then counts
        as not made: a key moving in stays on its own state, one moving out on its cells)."""
        try:
            if self._cells is not None:
                yield from move_flow(self._cells, self.limiter, *move)
        except StorageError as error:
            if move[1] in self.hot_keys:
                # A listed key is decided on its cells whatever its own state's primary
                # does (what the cells are for): its usage there is left behind.
                return None
            self._hot.failed(move)
            return error
        except BaseException:
            # Cancelled or interrupted part way: not made, so made again at a later hit
            # (a move made again charges nothing twice).
            if move[1] in self.hot_keys:
                with self._gates.lock:
                    self._listed.discard((move[1], move[2]))
            else:
                self._hot.failed(move)
            raise
        return None

    def reset_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[None]:
        """Forget ``key``'s usage wherever it may be (what support does to lift a block): its
        own state and its cells (a ``CellLimiter``), or its state and this process's lease
        (a ``TwoTier``); and a move back that failed, as there is nothing left to carry.
        A key detected hot stays hot, on its now empty cells. A store error is raised."""
        found = check_rates(rates)
        check_key(key)
        self._hot.forget((key, found))
        if self._tier is not None:
            yield from self._tier.reset_flow(key, rates)
            return
        yield from self.limiter.reset_flow(key, rates)
        if self._cells is not None:
            yield from self._cells.reset_flow(key, rates)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.store!r}, mitigation={self._mitigation()!r}, "
            f"hot_keys={len(self.hot_keys)}, detector={self.detector!r})"
        )

    def _mitigation(self) -> object:
        return self._cells if self._cells is not None else self._tier


class HotKeyLimiter(_HotBase["Store", Limiter, "CellLimiter | TwoTier"]):
    """``hit(key, rates, cost)`` like ``Limiter.hit``, with hot keys sent through ``mitigation``.

    ``mitigation`` is a ``CellLimiter`` or a ``TwoTier`` (with ``lease``) over the
    same store and algorithm. ``hot_keys`` are always mitigated; ``detector``
    (optional) adds keys as they turn hot (above its threshold). A detected key
    stays mitigated until ``hold`` seconds (default 2 x the detector's interval)
    after its rate was last above ``exit_ratio`` x the threshold (default 0.5;
    1 for no rate hysteresis); ``max_hot`` bounds the detected set. Ordinary
    keys are decided by ``limiter``, a ``Limiter(store, algorithm)`` made here.
    ``reset(key, rates)`` forgets the key's usage everywhere it may be.
    """

    _driver = Limiter
    _mitigations = (CellLimiter, TwoTier)
    _twin = ("AsyncHotKeyLimiter", (AsyncCellLimiter, AsyncTwoTier))
    hit = blocking(_HotBase.hit_flow)
    reset = blocking(_HotBase.reset_flow)


class AsyncHotKeyLimiter(_HotBase["AsyncStore", AsyncLimiter, "AsyncCellLimiter | AsyncTwoTier"]):
    """The asyncio twin of ``HotKeyLimiter``, with an ``AsyncCellLimiter`` or ``AsyncTwoTier``."""

    _driver = AsyncLimiter
    _mitigations = (AsyncCellLimiter, AsyncTwoTier)
    _twin = ("HotKeyLimiter", (CellLimiter, TwoTier))
    _failing = staticmethod(_araising)
    _gate = staticmethod(asyncio_gate)
    hit = awaiting(_HotBase.hit_flow)
    reset = awaiting(_HotBase.reset_flow)


def _a(name: str) -> str:
    """``name`` with its article: a CellLimiter, an AsyncCellLimiter."""
    return f"an {name}" if name[0] in "AEIOU" else f"a {name}"
