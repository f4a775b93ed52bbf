"""What a decision asks of its store, and the two loops that answer: sans-I/O flows.

Every decision is written once, as a generator (a *flow*). It yields what it
needs from the store and receives the answer:

- ``Ask(method, args)``: one call of a store method (``hit``, ``hit_all``,
  ``reset``, ``apply``, ``acquire_slot`` ...), or of ``method`` itself when it is
  a callable rather than a name (an adapter's I/O through another object's public
  API, e.g. a token budget's: a plain function for ``drive``, a coroutine
  function for ``adrive``). The flow receives what the method returned, or the
  ``Exception`` it raised (as a value: the flow decides what a failure means).
- ``Gather(flows)``: several flows at once. The flow receives their results in
  order; a blocking driver runs them one after the other, an asyncio driver side
  by side.
- ``Wait(seconds)``: sleep on the driver's clock (``clock.sleep`` or
  ``clock.asleep``), then go on; the flow receives None.

The flow's return value is the result. ``drive`` runs a flow on a blocking store,
``adrive`` on an asyncio store; they are the only code that differs between
``Limiter`` and ``AsyncLimiter``, and all they know is how to call a method.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

from ratewarden.clock import Clock

__all__ = ["Ask", "Flow", "Gather", "Wait", "adrive", "drive"]

T = TypeVar("T")


class Ask(NamedTuple):
    """One store call: the method's name (or a callable) and its positional arguments."""

    method: str | Callable[..., Any]
    args: tuple[Any, ...]


class Gather(NamedTuple):
    """Several flows to run at once; the asking flow receives their results in order."""

    flows: tuple[Flow[Any], ...]


class Wait(NamedTuple):
    """Sleep this many seconds on the driver's clock."""

    seconds: float


#: Yields ``Ask``, ``Gather`` or ``Wait``, receives the answer, returns a ``T``.
Flow = Generator["Ask | Gather | Wait", Any, T]


def drive(store: Any, flow: Flow[T], clock: Clock | None = None) -> T:
    """Run ``flow`` on a blocking store: each ``Ask`` is one method call."""
    try:
        step = next(flow)
        while True:
            answer: Any = None
            kind = type(step)
            if kind is Ask:
                method: Any = step.method  # type: ignore[union-attr]
                try:
                    if type(method) is str:
                        method = getattr(store, method)
                    answer = method(*step.args)  # type: ignore[union-attr]
                except Exception as exc:  # the flow decides what a failure means
                    answer = exc
            elif kind is Gather:
                answer = drive(store, _one_by_one(step.flows), clock)  # type: ignore[union-attr]
            else:
                _clock(clock).sleep(step.seconds)  # type: ignore[union-attr]
            step = flow.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        flow.close()


async def adrive(store: Any, flow: Flow[T], clock: Clock | None = None) -> T:
    """Run ``flow`` on an asyncio store: each ``Ask`` is one awaited call; a ``Gather``'s
    flows run side by side (in tasks, but a lone one)."""
    try:
        step = next(flow)
        while True:
            answer: Any = None
            kind = type(step)
            if kind is Ask:
                method: Any = step.method  # type: ignore[union-attr]
                try:
                    if type(method) is str:
                        method = getattr(store, method)
                    answer = await method(*step.args)  # type: ignore[union-attr]
                except Exception as exc:  # the flow decides what a failure means
                    answer = exc
            elif kind is Gather:
                flows = step.flows  # type: ignore[union-attr]
                if len(flows) == 1:
                    answer = [await adrive(store, flows[0], clock)]
                else:
                    answer = list(await asyncio.gather(*(adrive(store, f, clock) for f in flows)))
            else:
                await _clock(clock).asleep(step.seconds)  # type: ignore[union-attr]
            step = flow.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        flow.close()


def _one_by_one(flows: tuple[Flow[Any], ...]) -> Flow[list[Any]]:
    """A Gather's flows one after the other, as one flow: a blocking driver runs them so
    with one loop (not one per flow)."""
    results = []
    for flow in flows:
        results.append((yield from flow))
    return results


def _clock(clock: Clock | None) -> Clock:
    if clock is None:
        raise TypeError("this flow waits: drive it with a clock (Limiter.run does)")
    return clock
