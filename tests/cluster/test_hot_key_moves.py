"""A detected hot key's move when the store fails: the request is answered by its failure mode,
the move is not recorded as made, and it is made at a later hit once the store answers,
carrying the key's usage once; blocking and asyncio alike.

The store is a real redis-server that is stopped and started again on the same port with
its data (saved, then loaded from the same directory), so that the usage to carry outlives
the outage. Time is a ManualClock; rates are per hour, so the seconds the tests move the
clock by refill nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageUnavailableError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer

pytestmark = pytest.mark.redis

#: 60 an hour: three cells of 20. A carry of 10 units is charged 4 a cell, rounded up.
RATE = Rate(60, 3600)
KEY = "tenant:hot"
THRESHOLD = 10  # the key turns hot at its 11th request


async def answer(found: Any) -> Any:
    """``found``, awaited when it is the asyncio twin's coroutine."""
    return await found if inspect.isawaitable(found) else found


@dataclass
class Setup:
    """A hot-key limiter with cells on a redis-server that can be stopped and started again."""

    limiter: Any
    cells: Any
    store: Any
    clock: ManualClock
    server: RedisServer
    restart: Callable[[], RedisServer]

    async def hit(self, **options: Any) -> Any:
        return await answer(self.limiter.hit(KEY, RATE, **options))

    async def down(self) -> None:
        """Save the data and stop the server: every store call now fails."""
        with self.server.client() as admin:
            admin.save()
        self.server.stop()

    async def cells_used(self) -> int:
        return int(await answer(self.cells.run(self.cells.used_flow(KEY, RATE))))

    async def own_used(self) -> int:
        core = self.limiter.limiter
        peek = await answer(core.run(core.peek_flow(KEY, RATE)))
        return int(RATE.capacity - peek.remaining)


@pytest.fixture(params=["blocking", "asyncio"])
async def setup(
    request: pytest.FixtureRequest, make_redis: Callable[..., RedisServer], tmp_path: Path
) -> AsyncIterator[Setup]:
    """A (Async)HotKeyLimiter with 3 cells and a detector, on a server whose data is kept in
    ``tmp_path`` (a later start on the same port loads it)."""
    server = make_redis([f"dir {tmp_path}"])
    asyncio = request.param == "asyncio"
    clock = ManualClock(1_700_000_000.0)
    store: Any = (AsyncRedisStore if asyncio else RedisStore).from_url(
        server.url, clock=clock, timeout=0.5
    )
    cells: Any = (AsyncCellLimiter if asyncio else CellLimiter)(store, 3)
    detector = HotKeyDetector(THRESHOLD, interval=1.0, clock=clock)
    limiter: Any = (AsyncHotKeyLimiter if asyncio else HotKeyLimiter)(
        store, cells, detector=detector, hold=2.0
    )
    yield Setup(
        limiter,
        cells,
        store,
        clock,
        server,
        lambda: make_redis([f"dir {tmp_path}"], port=server.port),
    )
    await answer(store.aclose() if asyncio else store.close())


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_a_move_onto_the_cells_that_fails_is_answered_and_made_at_the_next_hit(
    setup: Setup, mode: str
) -> None:
    """Ten requests on the key's own state; the store goes down; the eleventh turns the key hot,
    and its move onto the cells fails: the request is answered by its failure mode (told to
    on_failure), the key is not on the cells, and so is the next. Once the store is back, the
    next request moves the key (its 10 units, 4 a cell) and is decided on a cell: 13 used on
    the cells, which admit 47 more (their 60, the carry rounded up by 2), then deny."""
    for _ in range(THRESHOLD):
        assert (await setup.hit()).allowed
    await setup.down()
    failures: list[Exception] = []
    for _ in range(2):
        decision = await setup.hit(failure_mode=mode, on_failure=failures.append)
        assert (decision.allowed, decision.degraded) == (mode == "open", mode)
        assert not setup.limiter.is_hot(KEY)
    assert len(failures) == 2
    assert all(isinstance(error, StorageUnavailableError) for error in failures)
    setup.restart()
    decision = await setup.hit()
    assert (decision.allowed, decision.degraded) == (True, "")
    assert setup.limiter.is_hot(KEY)
    assert await setup.cells_used() == 3 * 4 + 1
    assert sum([(await setup.hit()).allowed for _ in range(60)]) == 47


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_a_move_back_that_fails_is_answered_and_made_at_the_key_s_next_hit(
    setup: Setup, mode: str
) -> None:
    """A key on the cells (10 units carried, 21 more decided there: 33 on the cells) cools
    while the store is down: its next request is answered by its failure mode and the key
    keeps its usage on the cells. Once the store is back, the key's next request moves it back
    (its own state shows the 10 it had, so it is charged the 23 it lacks) and is decided there:
    34 used, not 11 (the cells' usage lost) nor 44 (the 10 counted twice)."""
    for _ in range(THRESHOLD + 21):
        assert (await setup.hit()).allowed
    assert setup.limiter.is_hot(KEY)
    assert (await setup.cells_used(), await setup.own_used()) == (3 * 4 + 21, THRESHOLD)
    await setup.down()
    setup.clock.advance(4.0)  # the detector forgets the key; its hold (2 s) runs out
    failures: list[Exception] = []
    decision = await setup.hit(failure_mode=mode, on_failure=failures.append)
    assert (decision.allowed, decision.degraded) == (mode == "open", mode)
    assert [type(error) for error in failures] == [StorageUnavailableError]
    assert not setup.limiter.is_hot(KEY)
    setup.restart()
    decision = await setup.hit()
    assert (decision.allowed, decision.degraded) == (True, "")
    assert await setup.own_used() == 3 * 4 + 21 + 1


async def test_a_move_made_again_after_it_was_partly_made_charges_only_what_the_cells_lack(
    setup: Setup,
) -> None:
    """A move that stopped after charging one cell its part (4 of the key's 10 units) left the
    key on its own state; made again, it charges the cells the 6 they lack, not the 10 again:
    10 on the cells, then the request that moved it."""
    for _ in range(THRESHOLD):
        assert (await setup.hit()).allowed
    core = setup.cells.limiter
    first, share = setup.cells.keys(KEY)[0], setup.cells.shares(RATE)[0]
    assert (await answer(core.hit(first, share, 4))).allowed
    assert await setup.cells_used() == 4
    assert (await setup.hit()).allowed  # the eleventh: hot, moved
    assert setup.limiter.is_hot(KEY)
    assert await setup.cells_used() == THRESHOLD + 1
