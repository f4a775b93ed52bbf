"""The keys a ``HotKeyLimiter``'s detector made hot, and the moves each request makes due.

A key's state is per rate set, so a detected key is a ``(key, rates)`` pair, and
each pair moves (carries its usage onto the cells or back) on its own. A pair is:

- detected (``_detected``, until when it is held): decided by the mitigation,
  unless it is also kept on its own state (``_own``): the cells cannot decide it
  (``not_split``: a rate with fewer units than cells, or a cost a cell's share
  cannot hold), so it stays where a plain limiter decides it;
- leaving (``_leaving``): its move back to the store failed, so its usage is still
  on the cells, and the move is tried again at its next request.

Everything here happens under one lock; the moves themselves are the caller's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ratewarden.rate import Rate

__all__ = ["Detected", "Ident", "Move"]

#: A key and the rate set its state is for.
Ident = tuple[str, tuple[Rate, ...]]
#: A detected key's move: into the mitigation (True) or out, with the rates it was moved with.
Move = tuple[bool, str, tuple[Rate, ...]]


class Detected:
    """The detected set of one limiter: at most ``max_hot`` pairs, each held ``hold_us``
    after its rate was last above the exit threshold (thread-safe)."""

    def __init__(self, hold_us: int, max_hot: int) -> None:
        self.hold_us = hold_us
        self.max_hot = max_hot
        self._lock = threading.Lock()
        # (key, rates) -> microseconds until it returns to the store.
        self._detected: OrderedDict[Ident, int] = OrderedDict()
        # Detected pairs kept on their own state; always also in ``_detected``.
        self._own: set[Ident] = set()
        # Pairs whose move back failed (at most max_hot kept).
        self._leaving: OrderedDict[Ident, None] = OrderedDict()
        # Rate sets whose keys were said to stay on their own state (said once each).
        self._said: OrderedDict[tuple[Rate, ...], None] = OrderedDict()

    def has(self, key: str) -> bool:
        """Whether ``key`` is detected and decided by the mitigation (under any rate set)."""
        with self._lock:
            return any(k == key and (k, r) not in self._own for k, r in self._detected)

    def route(
        self, ident: Ident, now: int, hot: bool, above_exit: bool, unfit: str | None
    ) -> tuple[bool | None, list[Move]]:
        """A request of ``ident`` at ``now``, ``hot`` (over the threshold) or ``above_exit``
        (over the exit threshold) by the detector; ``unfit``, why the cells cannot decide it
        (or None). (Whether the mitigation decides it, None when it is detected but kept on
        its own state; the moves to make first.)"""
        key, found = ident
        with self._lock:
            detected = self._detected
            if above_exit and ident in detected:
                # Held and still above the exit threshold: stays (and is not expired below).
                detected[ident] = now + self.hold_us
                detected.move_to_end(ident)
            moves = self._gone(self._expired(now))
            held = ident in detected
            # A key whose move back failed still has its usage on the cells.
            on_cells = ident in self._leaving
            if on_cells:
                del self._leaving[ident]
            if not held and not hot:
                if on_cells:
                    moves.append((False, key, found))
                return False, moves
            if not held:  # hot: turned hot now
                detected[ident] = now + self.hold_us
            mitigated: bool | None = ident not in self._own
            if mitigated and unfit is not None:
                # Kept on its own state while it is hot, its usage carried back first if it
                # is on the cells.
                if held or on_cells:
                    moves.append((False, key, found))
                self._own.add(ident)
            elif mitigated and not held and not on_cells:
                moves.append((True, key, found))
            if ident in self._own:
                mitigated = None
            if len(detected) > self.max_hot:
                moves += self._gone([detected.popitem(last=False)[0]])
        return mitigated, moves

    def mitigates(self, ident: Ident) -> bool:
        """Whether ``ident`` is decided by the mitigation now: detected and not kept on its
        own state, or its usage left on the cells by a failed move back."""
        with self._lock:
            held = ident in self._detected and ident not in self._own
            return held or ident in self._leaving

    def first_said(self, rates: tuple[Rate, ...]) -> bool:
        """True the first time a key of ``rates`` is kept on its own state (then False: a
        warning is said once per rate set, of the last ``max_hot`` rate sets)."""
        with self._lock:
            if rates in self._said:
                return False
            self._said[rates] = None
            if len(self._said) > self.max_hot:
                self._said.popitem(last=False)
            return True

    def failed(self, move: Move) -> None:
        """``move`` failed: it counts as not made (a key moving in stays on its own state,
        one moving out on its cells, to be moved back at its next request)."""
        into, key, rates = move
        ident = (key, rates)
        with self._lock:
            if into:
                self._detected.pop(ident, None)
                self._own.discard(ident)
            elif ident in self._detected:
                # Detected and to be kept on its own state, but its usage is still on the
                # cells: decided there until a move back is made.
                self._own.discard(ident)
            else:  # not detected again meanwhile
                self._leaving[ident] = None
                if len(self._leaving) > self.max_hot:
                    self._leaving.popitem(last=False)

    def forget(self, ident: Ident) -> None:
        """A failed move back of ``ident`` is not to be tried again (its usage was reset)."""
        with self._lock:
            self._leaving.pop(ident, None)

    def _gone(self, idents: list[Ident]) -> list[Move]:
        """The moves back of ``idents``, no longer detected: none for one kept on its own
        state, which has nothing on the cells."""
        moves: list[Move] = []
        for ident in idents:
            if ident in self._own:
                self._own.discard(ident)
            else:
                moves.append((False, *ident))
        return moves

    def _expired(self, now: int) -> list[Ident]:
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
