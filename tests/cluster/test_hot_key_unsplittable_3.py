"""A detected hot key the cells cannot decide stays on its own state, decided as a plain
limiter decides it, and a warning on the ``ratewarden.hotkeys`` logger says so once per rate
set: a rate with fewer units than cells (``2/second`` on 3 cells), or a cost the key could
admit but no cell's share can (40 of ``100/second`` on 3 cells of 33).

Before, the first kind raised ``ConfigurationError`` at every request once the key was
detected (a 500 behind a middleware for as long as the key stayed hot), and the second was
denied with ``retry_after`` infinite. A key already on cells when such a cost comes is moved
back first, with its usage, so the switch hands out no fresh allowance. Memory store and the
3-primary Cluster, blocking and asyncio, in ManualClock time.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import pytest
import redis

from ratewarden import AsyncLimiter, Limiter, MemoryStore, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock

LOGIN = Rate.parse("2/second")
HOURLY = Rate(100, 3600)
STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("cluster", id="cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
]


async def answer(found: Any) -> Any:
    """``found``, awaited when it is the asyncio twin's coroutine."""
    return await found if inspect.isawaitable(found) else found


def make_store(kind: str, clock: ManualClock, request: pytest.FixtureRequest) -> Any:
    """A MemoryStore, or a RedisStore on the emptied 3-primary Cluster."""
    if kind == "memory":
        return MemoryStore(clock=clock)
    client: redis.RedisCluster = request.getfixturevalue("cluster_client")
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    return RedisStore(client, clock=clock, timeout=1.0)


def hot_key_limiter(store: Any, clock: ManualClock, threshold: float = 100) -> HotKeyLimiter:
    detector = HotKeyDetector(threshold, clock=clock)
    return HotKeyLimiter(store, CellLimiter(store, 3), detector=detector, clock=clock)


@pytest.mark.parametrize("kind", STORES)
def test_a_detected_key_with_fewer_units_than_cells_is_decided_on_its_own_state(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """300 requests at 500/s for ``2/second`` on 3 cells: the key is detected, no request
    raises, and it admits exactly what a plain limiter admits under the same requests; one
    warning names the key, the rate and the way out."""
    clock = ManualClock()
    store = make_store(kind, clock, request)
    limiter = hot_key_limiter(store, clock)
    plain = Limiter(store)
    detected = False
    answers = []
    with caplog.at_level(logging.WARNING, logger="ratewarden.hotkeys"):
        for _ in range(300):
            mine = limiter.hit("login:alice", LOGIN)
            answers.append((mine.allowed, plain.hit("login:plain", LOGIN).allowed))
            detected = detected or limiter.detector.rate("login:alice").rate > 100  # type: ignore[union-attr]
            clock.advance(0.002)
    assert detected and not limiter.is_hot("login:alice")
    assert [a for a, _ in answers] == [b for _, b in answers]
    assert sum(a for a, _ in answers) == 3  # 2 at once, 1 refilled over 0.6 s
    said = [r.getMessage() for r in caplog.records if r.name == "ratewarden.hotkeys"]
    assert len(said) == 1
    assert "'login:alice' stays on its own state" in said[0]
    assert "2/second cannot be split into 3 cells" in said[0] and "fewer cells" in said[0]


def test_the_warning_is_said_once_per_rate_set(caplog: pytest.LogCaptureFixture) -> None:
    """Many detected keys under one unsplittable rate: one line, not one per key."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    limiter = hot_key_limiter(store, clock, threshold=10)
    with caplog.at_level(logging.WARNING, logger="ratewarden.hotkeys"):
        for user in range(5):
            for _ in range(30):
                limiter.hit(f"login:{user}", LOGIN)
                clock.advance(0.001)
    assert len([r for r in caplog.records if r.name == "ratewarden.hotkeys"]) == 1


@pytest.mark.parametrize("kind", STORES)
def test_a_cost_no_cell_can_hold_moves_a_detected_key_back_with_its_usage(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """100/hour on 3 cells (33, 33, 34): 25 hits turn the key hot (20 carried onto the
    cells, rounded up: 7 each); a cost of 40 moves it back, usage and all (26), and is
    admitted; a second 40 is denied (not forever: retry_after is finite); hits fill the
    rest. 99 in all (the carry's rounding up costs one), never more than the 100 the key
    allows; before, the first 40 was denied with retry_after infinite."""
    clock = ManualClock()
    store = make_store(kind, clock, request)
    limiter = hot_key_limiter(store, clock, threshold=20)
    admitted = sum(limiter.hit("tenant:x", HOURLY).allowed for _ in range(25))
    assert limiter.is_hot("tenant:x")
    with caplog.at_level(logging.WARNING, logger="ratewarden.hotkeys"):
        big = limiter.hit("tenant:x", HOURLY, 40)
    assert big.allowed and not limiter.is_hot("tenant:x")
    said = [r.getMessage() for r in caplog.records if r.name == "ratewarden.hotkeys"]
    assert len(said) == 1 and "a cost of 40 fits 100/hour" in said[0]
    again = limiter.hit("tenant:x", HOURLY, 40)
    assert not again.allowed and again.retry_after < float("inf")
    admitted += 40 + sum(limiter.hit("tenant:x", HOURLY).allowed for _ in range(60))
    assert admitted == 99
    # Kept on its own state while it is held: the cells show what they had when it left.
    assert limiter.mitigation.used("tenant:x", HOURLY) == 26  # type: ignore[union-attr]


async def test_the_asyncio_twin_keeps_an_unsplittable_key_on_its_own_state() -> None:
    """``AsyncHotKeyLimiter`` does the same: no exception, a plain limiter's answers."""
    clock = ManualClock()
    store = AsyncMemoryStore(clock=clock)
    detector = HotKeyDetector(100, clock=clock)
    limiter = AsyncHotKeyLimiter(store, AsyncCellLimiter(store, 3), detector=detector, clock=clock)
    plain = AsyncLimiter(store)
    mine, theirs = [], []
    for _ in range(300):
        mine.append((await limiter.hit("login:alice", LOGIN)).allowed)
        theirs.append((await plain.hit("login:plain", LOGIN)).allowed)
        clock.advance(0.002)
    assert mine == theirs and sum(mine) == 3 and not limiter.is_hot("login:alice")


def test_a_configured_hot_key_is_still_refused_on_a_rate_it_cannot_split() -> None:
    """``hot_keys`` is a choice made for the key: its rate's split is checked as
    ``CellLimiter`` checks it, with the ConfigurationError docs/scaling.md states."""
    store = MemoryStore()
    limiter = HotKeyLimiter(store, CellLimiter(store, 3), hot_keys=["login:alice"])
    with pytest.raises(ConfigurationError, match="cannot split 2/second into 3 cells"):
        limiter.hit("login:alice", LOGIN)
