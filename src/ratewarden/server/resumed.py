"""``Resumed``: a call's coroutine, started outside a task, handed to a task where it waits.

The native transport (``grpc_native.py``) steps each call of a batch right in the batch's turn
of the event loop; a call the store answers at once ends there, with no task, and only one
that waits (on Redis) becomes a task, resumed where it waits, through this wrapper.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["Resumed"]


class Resumed(Coroutine[Any, Any, None]):
    """A call's coroutine, started outside a task and suspended on ``waiting`` (the future it
    awaits), as a coroutine for a task to run: the task's first step hands ``waiting`` to the
    event loop, and every later send or throw goes on into the call. A cancellation that
    comes before the task's first step is thrown into the call where it waits (an ``async
    def`` around the call would be cancelled before it ran, and leave the call waiting)."""

    __slots__ = ("_call", "_waiting")

    def __init__(self, call: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._call = call
        self._waiting = waiting

    def send(self, value: Any) -> Any:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            return waiting
        return self._call.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        waiting, self._waiting = self._waiting, None
        if waiting is not None and isinstance(typ, asyncio.CancelledError):
            # Cancelled before the task's first step: cancel what the call awaits, as a task
            # cancels the future it waits on (a Redis reply's, which then goes unread). No task
            # reads that future's end: an ``asyncio.gather`` (descriptors of several
            # algorithms, decided side by side) ends with the CancelledError as its exception,
            # which asyncio would print as never retrieved.
            waiting.cancel()
            waiting.add_done_callback(_retrieved)
        if val is None and tb is None:
            return self._call.throw(typ)
        return self._call.throw(typ, val, tb)

    def close(self) -> None:
        self._call.close()

    def __await__(self) -> Generator[Any, Any, None]:
        """Awaited rather than run by a task: the same steps, through ``send`` and ``throw``."""
        step: Callable[[], Any] = functools.partial(self.send, None)
        while True:
            try:
                waiting = step()
            except StopIteration:
                return
            try:
                value = yield waiting
            except BaseException as exc:  # a cancellation: it goes into the call
                step = functools.partial(self.throw, exc)
            else:
                step = functools.partial(self.send, value)


def _retrieved(future: Any) -> None:
    """Read how ``future`` ended, so that asyncio does not report it as never retrieved."""
    if not future.cancelled():
        future.exception()
