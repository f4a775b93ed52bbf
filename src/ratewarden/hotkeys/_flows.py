"""Store calls written once as generators, driven by a blocking or an asyncio loop.

A flow yields ``(key, rates, cost)`` for each store call it needs and receives
the store's Decision; its return value is the result. ``drive`` runs one on a
``Store`` and ``adrive`` on an ``AsyncStore``: the twin classes differ by
which one they call. Store errors propagate unchanged.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store

__all__ = ["Call", "Flow", "adrive", "drive"]

#: One store call: the key, its rates, the cost.
Call = tuple[str, tuple[Rate, ...], int]
T = TypeVar("T")
#: Yields store calls, receives their Decisions, returns a ``T``.
Flow = Generator[Call, Decision, T]


def drive(store: Store, algorithm: str, flow: Flow[T]) -> T:
    """Run ``flow`` on a blocking store."""
    try:
        call = next(flow)
        while True:
            call = flow.send(store.hit(algorithm, *call))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        flow.close()


async def adrive(store: AsyncStore, algorithm: str, flow: Flow[T]) -> T:
    """Run ``flow`` on an asyncio store."""
    try:
        call = next(flow)
        while True:
            call = flow.send(await store.hit(algorithm, *call))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        flow.close()
