"""Support lifts a block on a hot key: ``CellLimiter.reset`` and ``HotKeyLimiter.reset`` forget
its usage wherever it is (own state, every cell, the cells' cached denial, a lease); blocking and
asyncio. Also: a mitigation of the other twin is refused naming the twin to use, and
``CellLimiter.charge`` takes one count per layer."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from ratewarden import MemoryStore, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier

RATE = Rate(30, 3600)  # three cells of 10; nothing refills in the seconds the tests move


async def answer(found: Any) -> Any:
    """``found``, awaited when it is the asyncio twin's coroutine."""
    return await found if inspect.isawaitable(found) else found


def made(asyncio: bool, clock: ManualClock) -> tuple[Any, Any]:
    """A store and cells of the twin asked for."""
    store: Any = AsyncMemoryStore(clock=clock) if asyncio else MemoryStore(clock=clock)
    cells: Any = AsyncCellLimiter(store, 3) if asyncio else CellLimiter(store, 3)
    return store, cells


async def drain(limiter: Any, key: str, clock: ManualClock | None = None) -> int:
    """Requests until one is denied (one a second on ``clock``, if given: below a detector's
    threshold, and too fast for 30 an hour to refill a unit); how many were admitted."""
    admitted = 0
    while (await answer(limiter.hit(key, RATE))).allowed:
        admitted += 1
        if clock is not None:
            clock.advance(1)
    return admitted


@pytest.mark.parametrize("asyncio", [False, True], ids=["blocking", "asyncio"])
async def test_cell_reset_lifts_a_block_cached_denial_included(asyncio: bool) -> None:
    """30 admitted, then denied (and the denial cached); after ``reset`` 30 more."""
    clock = ManualClock()
    _, cells = made(asyncio, clock)
    assert await drain(cells, "k") == 30
    assert not (await answer(cells.hit("k", RATE))).allowed
    await answer(cells.reset("k", RATE))
    assert await answer(cells.used("k", RATE)) == 0
    assert await drain(cells, "k") == 30


@pytest.mark.parametrize("asyncio", [False, True], ids=["blocking", "asyncio"])
async def test_hot_key_reset_lifts_a_block_on_a_configured_key(asyncio: bool) -> None:
    """A configured hot key blocked on its cells admits its whole limit again after ``reset``."""
    clock = ManualClock()
    store, cells = made(asyncio, clock)
    kind = AsyncHotKeyLimiter if asyncio else HotKeyLimiter
    limiter = kind(store, cells, hot_keys=["k"])
    assert await drain(limiter, "k") == 30
    await answer(limiter.reset("k", RATE))
    assert await drain(limiter, "k") == 30


@pytest.mark.parametrize("asyncio", [False, True], ids=["blocking", "asyncio"])
async def test_hot_key_reset_clears_own_state_and_cells_of_a_detected_key(asyncio: bool) -> None:
    """A detected key blocked (usage on its own state, carried to the cells) is reset on both:
    after it cools, moving back carries nothing, and it admits its whole limit."""
    clock = ManualClock()
    store, cells = made(asyncio, clock)
    kind = AsyncHotKeyLimiter if asyncio else HotKeyLimiter
    limiter = kind(store, cells, detector=HotKeyDetector(5, clock=clock), clock=clock)
    assert await drain(limiter, "k") == 29  # the 5 units carried are rounded up to 2 a cell
    assert limiter.is_hot("k")
    await answer(limiter.reset("k", RATE))
    assert await answer(cells.used("k", RATE)) == 0
    clock.advance(10)  # cooled: the next hit moves it back, with nothing to carry
    assert (await answer(limiter.hit("k", RATE))).allowed
    assert not limiter.is_hot("k")
    assert await drain(limiter, "k", clock) == 29


@pytest.mark.parametrize("asyncio", [False, True], ids=["blocking", "asyncio"])
async def test_hot_key_reset_on_leases_forgets_the_lease_and_the_state(asyncio: bool) -> None:
    """With a TwoTier mitigation (lease 5) the key's one state and this process's lease go."""
    clock = ManualClock()
    store: Any = AsyncMemoryStore(clock=clock) if asyncio else MemoryStore(clock=clock)
    tier: Any = AsyncTwoTier(store, lease=5) if asyncio else TwoTier(store, lease=5)
    kind = AsyncHotKeyLimiter if asyncio else HotKeyLimiter
    limiter = kind(store, tier, hot_keys=["k"])
    assert await drain(limiter, "k") == 30
    await answer(limiter.reset("k", RATE))
    assert await drain(limiter, "k") == 30


def test_a_mitigation_of_the_other_twin_names_the_twin_to_use() -> None:
    """``HotKeyLimiter`` given an ``AsyncTwoTier`` says to use ``AsyncHotKeyLimiter``, and the
    asyncio shell given a ``CellLimiter`` says ``HotKeyLimiter``."""
    with pytest.raises(ConfigurationError, match="an AsyncTwoTier goes with AsyncHotKeyLimiter"):
        HotKeyLimiter(MemoryStore(), AsyncTwoTier(lease=5))
    store = AsyncMemoryStore()
    with pytest.raises(ConfigurationError, match="a CellLimiter goes with HotKeyLimiter"):
        AsyncHotKeyLimiter(store, CellLimiter(MemoryStore(), 3))


def test_charge_takes_one_count_per_layer() -> None:
    """``charge(key, rates, [2, 20])`` charges the second layer 20 and the first 2 (spread over
    the cells, rounded up); a list of the wrong length is refused and charges nothing."""
    cells = CellLimiter(MemoryStore(clock=ManualClock()), 3)
    rates = (Rate(10, 1), Rate(100, 60))
    cells.charge("k", rates, [2, 20])
    first, second = cells.usage("k", rates)
    assert 2 <= first <= 4 and 20 <= second <= 22
    with pytest.raises(ConfigurationError, match="one count per rate is 2, got 3"):
        cells.charge("other", rates, [1, 2, 3])
    assert cells.usage("other", rates) == (0, 0)
