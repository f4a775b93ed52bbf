"""Budgets on every store: memory, Redis and a 3-primary Cluster, sync and async.

``stores`` is a factory of ``Harness`` objects that hide the sync/async split
behind one awaitable interface, so each test is written once.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ratewarden import Rate
from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.testing import ManualClock
from tests._stores import STORES, Closers, close_all, make_store


async def settle(value: Any) -> Any:
    """Await ``value`` if it is awaitable (the async twins), else return it."""
    return await value if inspect.isawaitable(value) else value


@dataclass
class Harness:
    """One store of the parametrized kind, on a ManualClock."""

    kind: str
    store: Any
    clock: ManualClock

    @property
    def is_async(self) -> bool:
        return self.kind.endswith("async")

    def budget(self, limits: Mapping[str, Rate | str], **options: Any) -> Any:
        cls = AsyncTokenBudget if self.is_async else TokenBudget
        return cls(self.store, limits, **options)


@pytest.fixture(params=STORES)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., Harness]]:
    """A factory: ``stores(start=...)`` -> Harness on the parametrized store."""
    closers: Closers = []

    def factory(start: float = 1_700_000_000.0) -> Harness:
        clock = ManualClock(start)
        return Harness(request.param, make_store(request, request.param, clock, closers), clock)

    yield factory
    await close_all(closers)
