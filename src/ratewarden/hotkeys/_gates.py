"""The moves under way in one process, and the requests held until each is made.

A key's move (its usage carried onto its cells, or back) is a few store calls made
by the request that finds it due. Another thread or task of the same process that
asks about the key meanwhile must not be decided on the move's destination before
the move is made: the carry charges what the destination lacks of the source's
usage, so a hit that lands on the cells between the carry's look at them and its
charge would count as carried, and be free. Such a request waits at the key's gate
(``Gates``) until the move ends, made or failed.

Requests in other processes are not held: a move there is bounded by the moves'
own gap (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ratewarden.hotkeys._detected import Ident, Move

__all__ = ["Gates", "asyncio_gate", "thread_gate"]


class _ThreadGate:
    """A gate for threads: ``wait`` blocks until ``open``."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.wait: Callable[[], Any] = self._event.wait
        self.open: Callable[[], None] = self._event.set


class _TaskGate:
    """A gate for the tasks of one event loop: ``wait`` is a coroutine function."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.wait: Callable[[], Any] = self._event.wait
        self.open: Callable[[], None] = self._event.set


def thread_gate() -> _ThreadGate:
    return _ThreadGate()


def asyncio_gate() -> _TaskGate:
    return _TaskGate()


class Gates:
    """The keys (with their rate sets) a request of this process is moving now.

    ``lock`` is held while a request is routed, so that the move it is handed and its
    gate are one step: no other request can find the key routed and not yet gated."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.lock = threading.Lock()
        self._moving: dict[Ident, Any] = {}

    def busy(self) -> bool:
        """Under ``lock``: whether any move is under way."""
        return bool(self._moving)

    def take(self, moves: Iterable[Move], ident: Ident) -> tuple[list[Any], Any]:
        """Under ``lock``: gate each of ``moves``' keys (the moves this request makes); then
        (those gates, the gate ``ident``'s request must wait at first, or None)."""
        mine = []
        for _, key, rates in moves:
            moving = (key, rates)
            gate = self._make()
            self._moving[moving] = gate
            mine.append((moving, gate))
        held = self._moving.get(ident)
        if held is not None and all(gate is not held for _, gate in mine):
            return mine, held
        return mine, None

    def give_back(self, mine: list[Any]) -> None:
        """The moves of ``mine`` ended: open their gates and forget them."""
        with self.lock:
            for ident, gate in mine:
                if self._moving.get(ident) is gate:
                    del self._moving[ident]
                gate.open()
