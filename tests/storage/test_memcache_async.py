"""AsyncMemcacheStore on a real memcached: MemoryStore's decisions, with many calls in flight on
one pipelined connection, exact under contention, and not wedged by a cancelled call."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from ratewarden import AsyncMemoryStore, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.budgets import AsyncTokenBudget
from ratewarden.errors import ConfigurationError
from ratewarden.storage.memcache import AsyncMemcacheStore
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer
from tests._servers import HOST, STORE_TIMEOUT, free_port
from tests.storage.test_memcache import RATE_SETS, Step, long_window, outcome, script

ALGORITHMS = sorted(ALGORITHMS)


async def aoutcome(step: Step, store: Any) -> Any:
    try:
        return await getattr(store, step[0])(*step[1:])
    except ConfigurationError as exc:
        return type(exc), str(exc)


def key_of(step: Step) -> str:
    key: str = step[2] if step[0] in ("hit", "reset") else step[1]
    return key


def batches(steps: list[Step]) -> list[tuple[float, list[Step]]]:
    """The calls between two clock moves, each with the move before it."""
    found: list[tuple[float, list[Step]]] = [(0.0, [])]
    for step in steps:
        if step[0] == "advance":
            found.append((step[1], []))
        else:
            found[-1][1].append(step)
    return found


@pytest.mark.parametrize("stores", [1, 2])
async def test_calls_in_flight_together_decide_as_memory_does_in_turn(
    memcached: MemcachedServer, stores: int
) -> None:
    """The seeded scripts of test_memcache, every call between two clock moves started at once
    (on one store, or spread over two): each result is MemoryStore's for the calls made one
    after the other in the order they were started (calls on one item run in that order)."""
    memory_clock, memcache_clock = ManualClock(), ManualClock()
    memory = MemoryStore(clock=memory_clock)
    remote = [
        AsyncMemcacheStore(memcached.url, clock=memcache_clock, timeout=STORE_TIMEOUT)
        for _ in range(stores)
    ]
    rng = random.Random(stores)
    in_flight = 0
    for index, algorithm in enumerate(ALGORITHMS):
        for number, (advance, calls) in enumerate(batches(script(100 + index, algorithm, 300))):
            memory_clock.advance(advance)
            memcache_clock.advance(advance)
            # Calls on one item from two stores would race, as two processes' do: each key
            # is one store's for the batch, and may be the other's in the next.
            owners: dict[str, AsyncMemcacheStore] = {}
            placed = [owners.setdefault(key_of(step), rng.choice(remote)) for step in calls]
            theirs = await asyncio.gather(
                *(aoutcome(step, store) for step, store in zip(calls, placed, strict=True))
            )
            mine = [outcome(memory, step) for step in calls]
            assert theirs == mine, (algorithm, number, calls)
            in_flight = max(in_flight, len(calls))
    assert in_flight >= 10
    for store in remote:
        await store.aclose()


async def test_two_stores_racing_on_every_call_decide_as_memory_does(
    memcached: MemcachedServer,
) -> None:
    """40 hits from each of two stores, all in flight at once, on one key with limit 50 (one
    process's stores race as two processes do): exactly 50 admitted, each remaining count once."""
    clock = ManualClock()
    first, second = (
        AsyncMemcacheStore(memcached.url, clock=clock, timeout=STORE_TIMEOUT) for _ in range(2)
    )
    rate = Rate.parse("50/hour")
    results = await asyncio.gather(
        *(store.hit("sliding_window", "hot", rate) for _ in range(40) for store in (first, second))
    )
    assert sum(d.allowed for d in results) == 50
    assert sorted(d.remaining for d in results if d.allowed) == list(range(50))
    assert (await first.hit("sliding_window", "hot", rate, 0)).remaining == 0
    await first.aclose()
    await second.aclose()


async def test_two_hundred_concurrent_hits_admit_exactly_the_limit(
    memcached: MemcachedServer,
) -> None:
    """200 hits in flight at once from one store on one key with limit 50: exactly 50, each
    remaining count once, on the system clock (a window of an hour that does not end now)."""
    store = AsyncMemcacheStore(memcached.url, timeout=STORE_TIMEOUT)
    rate = long_window(50)
    decisions = await asyncio.gather(*(store.hit("fixed_window", "hot", rate) for _ in range(200)))
    assert sum(d.allowed for d in decisions) == 50
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(50))
    await store.aclose()


async def test_layered_concurrent_hits_are_all_or_nothing(memcached: MemcachedServer) -> None:
    """Layers of 30 and 100 hit 120 times at once at costs 1-3: every layer holds exactly the
    cost admitted, which never passes 30."""
    store = AsyncMemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    small, large = Rate.parse("30/hour"), Rate.parse("100/day")
    costs = [random.Random(5).randint(1, 3) for _ in range(120)]
    decisions = await asyncio.gather(
        *(store.hit("gcra", "hot", [small, large], cost) for cost in costs)
    )
    admitted = sum(cost for cost, d in zip(costs, decisions, strict=True) if d.allowed)
    assert 28 <= admitted <= 30
    assert (await store.hit("gcra", "hot", small, 0)).remaining == 30 - admitted
    assert (await store.hit("gcra", "hot", large, 0)).remaining == 100 - admitted
    await store.aclose()


async def test_cancelled_calls_leave_the_item_usable(memcached: MemcachedServer) -> None:
    """Calls cancelled while they wait for their turn on an item, or while their request is on
    the wire, hand the item on: the calls after them complete, and the count stays exact."""
    store = AsyncMemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    rate = Rate.parse("1000/hour")
    tasks = [asyncio.ensure_future(store.hit("fixed_window", "k", rate)) for _ in range(30)]
    await asyncio.sleep(0)  # the first is on the wire; the others wait for their turn
    for task in tasks[::3]:
        task.cancel()
    done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
    finished = [d for d in done if not isinstance(d, BaseException)]
    assert len(finished) == 20
    counted = 1000 - (await store.hit("fixed_window", "k", rate, 0)).remaining
    # A call cancelled on the wire may or may not have been written; one waiting never was.
    assert 20 <= counted <= 21
    assert (await store.hit("fixed_window", "k", rate)).remaining == 999 - counted
    await store.aclose()


async def test_token_budgets_answer_as_on_the_memory_store(memcached: MemcachedServer) -> None:
    """AsyncTokenBudget over AsyncMemcacheStore and over AsyncMemoryStore: 150 seeded reserves,
    settles, peeks and clock steps answer alike."""
    limits = {"requests": Rate(7, 1), "tokens": Rate(10_000, 60, burst=12_000)}
    clock = ManualClock(1_700_000_000.5)
    memory = AsyncTokenBudget(AsyncMemoryStore(clock=clock), limits, max_output_tokens=900)
    store = AsyncMemcacheStore(memcached.url, clock=clock, timeout=STORE_TIMEOUT)
    remote = AsyncTokenBudget(store, limits, max_output_tokens=900)
    rng = random.Random(3)
    held = []
    for step in range(150):
        action, key = rng.random(), rng.choice(["a", "ключ"])
        if action < 0.5:
            tokens = rng.randint(0, 3000)
            mine = await memory.reserve(key, tokens, reservation_id=f"r{step}")
            assert await remote.reserve(key, tokens, reservation_id=f"r{step}") == mine, step
            held.append(mine)
        elif action < 0.8 and held:
            reservation, used = rng.choice(held), rng.randint(0, 1500)
            assert await memory.settle(reservation, output_tokens=used) == await remote.settle(
                reservation, output_tokens=used
            ), step
        elif action < 0.9:
            assert await memory.peek(key) == await remote.peek(key), step
        else:
            clock.advance_us(rng.choice([1, 142_857, 2_000_000, 30_000_000, 700_000_000]))
    await store.aclose()


async def test_bad_calls_are_refused_before_anything_is_sent() -> None:
    """On a closed port, a bad call is a ConfigurationError (had it been sent, the store would
    have said the server is unavailable)."""
    store = AsyncMemcacheStore([(HOST, free_port())], clock=ManualClock())
    with pytest.raises(ConfigurationError, match="no separate burst"):
        await store.hit("fixed_window", "k", RATE_SETS[2])
    with pytest.raises(ConfigurationError, match="key"):
        await store.hit("gcra", "", RATE_SETS[0])
    with pytest.raises(ConfigurationError, match="cost"):
        await store.hit("gcra", "k", RATE_SETS[0], -1)
    with pytest.raises(ConfigurationError, match="lease"):
        await store.release_slot("k", "")
    with pytest.raises(ConfigurationError, match="timeout"):
        AsyncMemcacheStore("memcache://127.0.0.1:1", timeout=0)
    await store.aclose()


async def test_ping_and_repr(memcached: MemcachedServer) -> None:
    store = AsyncMemcacheStore.from_url(memcached.url, timeout=0.5)
    assert await store.ping() is True
    assert repr(store) == f"AsyncMemcacheStore('{memcached.url}', timeout=0.5)"
    assert store.node_of("k") == ""
    await store.aclose()
