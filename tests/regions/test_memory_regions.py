"""MemoryRegionStore against RegionStore on a real redis-server: the same calls, the same answers.

One ManualClock for both: the Redis store sends its now as the script's ``ARGV[1]``, the
memory store runs the script's pure twin at it. Random sequences of the budget's Ops
(hits and merges over several keys, rates, regions, costs and caps, with clock steps
that land on and across window edges) and of the exchange's calls must answer alike.

One difference is by design: with an injected clock Redis keeps every key a day of its
own time, where the memory store drops a window hash when it expires, one period past
its window's end. ``read_counts`` is compared on the windows that still count (the
current one and the one before); the memory store must never show an older one.
"""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import pytest

from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests.regions.conftest import Region

START = 1_700_000_040.0  # a whole minute
#: (limit, period_us): a minute, a second, and 2.5 ms, whose windows a step often crosses.
RATES = ((600, 60_000_000), (10, 1_000_000), (7, 2_500))
KEYS = ("t1", "t2", "a{b}:c")
MEMBERS = tuple(f"{limit}:{period}:{key}" for limit, period in RATES for key in KEYS)
NAMES = ("us", "eu", "ap")


def _live(entries: list[tuple[int, str, int]], member: str, now_us: int) -> list[Any]:
    """The entries of a window that still counts at ``now_us``: the current or the last."""
    period = int(member.split(":")[1])
    return [entry for entry in entries if entry[0] >= now_us // period - 1]


def _budget_ops(rng: random.Random, store: Any, now_us: int) -> list[Any]:
    """One random step's Ops, planned by ``store``: a hit, a merge, or a round's merges."""
    member = rng.choice(MEMBERS)
    limit, period = (int(part) for part in member.split(":")[:2])
    region = rng.choice(NAMES)
    if rng.random() < 0.55:
        cost = rng.choice((0, 1, 1, 2, 3, limit, limit + 1))
        if rng.random() < 0.6:
            return [store.budget_hit(member, region, cost, rng.choice((0, 1, limit // 2, limit)))]
        # A layered limit: two or three of the key's members, in any order, in one script.
        key = member.split(":", 2)[2]
        layers = [(f"{lim}:{per}:{key}", rng.choice((0, 1, lim // 2, lim))) for lim, per in RATES]
        return [store.budget_hit_layers(rng.sample(layers, rng.choice((2, 3))), region, cost)]
    ops = []
    for _ in range(rng.choice((1, 1, 3))):
        window = now_us // period
        entries = [
            (window + rng.choice((0, 0, 0, -1, 1)), rng.choice(NAMES), rng.randrange(limit + 3))
            for _ in range(rng.randrange(4))
        ]
        share = rng.choice(((1, 1), (1, 3), (2, 3), (30, 60), (0, 1)))
        # Silent peers held at a cap of this window or another, none, or their default.
        holds = [
            (
                rng.choice((window, window, window - 1, -1)),
                name,
                rng.choice((-1, 0, rng.randrange(limit + 3))),
                rng.randrange(limit + 1),
            )
            for name in rng.sample(NAMES, rng.choice((0, 0, 1, 2)))
        ]
        recompute = rng.random() < 0.6
        ops.append(store.budget_merge(member, region, share, recompute, entries, holds))
    return ops


def _advance(rng: random.Random, clock: ManualClock) -> None:
    """A step of the clock: small, large, or exactly to (or just before) a window's edge."""
    roll = rng.random()
    if roll < 0.5:
        clock.advance(rng.choice((0.000001, 0.0005, 0.002, 0.3, 1.0, 59.0, 125.0)))
    else:
        period = rng.choice(RATES)[1]
        edge = (clock.now_us() // period + 1) * period - clock.now_us()
        clock.advance((edge - rng.choice((0, 0, 1))) / 1_000_000)


@pytest.mark.parametrize("seed", range(6))
def test_random_budget_ops_answer_as_the_script_on_redis(
    regions: dict[str, Region], seed: int
) -> None:
    """Both stores plan the same Ops (the same keys and ARGV), and each Op, alone or in a
    round's batch, gets the same reply from the twin as from region_budget.lua; the window
    hashes read back the same entries in the same order at every step, also after the
    region's state is lost now and then (merges then take its own count back)."""
    rng = random.Random(seed)
    clock = ManualClock(START)
    on_redis = RegionStore(regions["us"].local(), clock=clock)
    in_memory = MemoryRegionStore(clock=clock)
    seen: dict[str, int] = {}
    for number in range(300):
        if rng.random() < 0.3:
            _advance(rng, clock)
            continue
        if rng.random() < 0.04:
            # The region's state is lost (a restart without persistence): merges that follow
            # take its own count back from the entries they are given.
            on_redis.client.flushall()
            in_memory.table.clear()
            seen["lost"] = seen.get("lost", 0) + 1
            continue
        state = rng.getstate()
        ops = _budget_ops(rng, on_redis, clock.now_us())
        rng.setstate(state)
        assert _budget_ops(rng, in_memory, clock.now_us()) == ops, f"step {number}"
        if len(ops) == 1 and rng.random() < 0.7:
            replies, expected = [in_memory.apply(ops[0])], [on_redis.apply(ops[0])]
        else:
            replies, expected = in_memory.apply_all(ops), on_redis.apply_all(ops)
        assert replies == expected, f"step {number}: {ops}"
        for op, reply in zip(ops, replies, strict=True):
            kind = op.args[1] if op.args[1] == "merge" else ("allowed", "denied")[1 - reply[0]]
            seen[kind] = seen.get(kind, 0) + 1
            seen["capped"] = seen.get("capped", 0) + (op.args[1] == "merge" and reply[3] >= 0)
            if len(op.keys) > 1:
                seen[f"layered {kind}"] = seen.get(f"layered {kind}", 0) + 1
        now = clock.now_us()
        counts = in_memory.read_counts(list(MEMBERS))
        redis_counts = on_redis.read_counts(list(MEMBERS))
        for member, found, expected_entries in zip(MEMBERS, counts, redis_counts, strict=True):
            assert found == _live(found, member, now), f"step {number}: {member} outlived"
            assert found == _live(expected_entries, member, now), f"step {number}: {member}"
    print(f"\n[regions] memory twin, seed {seed}: {dict(sorted(seen.items()))}")
    for kind in ("allowed", "denied", "merge", "capped"):
        assert seen.get(kind, 0) > 10, kind
    for kind in ("layered allowed", "layered denied"):
        assert seen.get(kind, 0) > 3, kind


def _exchange_call(rng: random.Random, now_us: int) -> tuple[str, tuple[Any, ...]]:
    """One random exchange call at ``now_us``: the method's name and its arguments."""
    region = rng.choice(NAMES)
    roll = rng.random()
    if roll < 0.25:
        members = {
            rng.choice(MEMBERS): now_us + rng.choice((-1_000, 0, 1, 999, 1_500, 2_000_000))
            for _ in range(rng.randrange(4))
        }
        return "publish_active", (region, members, now_us)
    if roll < 0.45:
        return "active", (region, now_us, rng.choice((1, 2, 100)))
    if roll < 0.65:
        return "publish_demand", (region, rng.randrange(1, 12), rng.randrange(1_000))
    if roll < 0.85:
        return "demand", (region, rng.randrange(-2, 14))
    if roll < 0.92:
        return "finish_round", (region, now_us - rng.choice((0, 1, 2_000_000)))
    return "read_round", (region, rng.sample(MEMBERS, rng.randrange(3)))


@pytest.mark.parametrize("seed", range(4))
def test_random_exchange_calls_answer_as_on_redis(regions: dict[str, Region], seed: int) -> None:
    """Active sets (members added, renewed, timed out, capped by ``limit``), demand counts
    (written, kept four intervals, read) and rounds (recorded, read with the window hashes):
    every call answers as the Redis store's does."""
    rng = random.Random(seed)
    clock = ManualClock(START)
    on_redis = RegionStore(regions["eu"].local(), clock=clock)
    in_memory = MemoryRegionStore(clock=clock)
    answered: dict[str, int] = {}
    for number in range(350):
        if rng.random() < 0.25:
            # Under an hour in all: Redis keeps demand counts an hour of its own time.
            clock.advance(rng.choice((0.000001, 0.0005, 0.001, 0.0015, 1.0, 5.0)))
            continue
        method, args = _exchange_call(rng, clock.now_us())
        expected = getattr(on_redis, method)(*args)
        assert getattr(in_memory, method)(*args) == expected, f"step {number}: {method}{args}"
        if expected:
            answered[method] = answered.get(method, 0) + 1
    print(f"\n[regions] memory exchange, seed {seed}: {dict(sorted(answered.items()))}")
    assert answered.get("active", 0) > 5 and answered.get("demand", 0) > 5
    assert answered.get("read_round", 0) > 5


def test_a_window_hash_expires_one_period_past_its_windows_end() -> None:
    """The twin's write: a hash of window w counts until (w + 2) * period and is gone then,
    and a region's state leaves nothing behind once its times have passed."""
    clock = ManualClock(START)
    store = MemoryRegionStore(clock=clock)
    member = "10:1000000:k"
    assert store.apply(store.budget_hit(member, "us", 3, 10)) == [1, 3, 10, 1_000_000]
    window = clock.now_us() // 1_000_000
    store.publish_active("us", {member: clock.now_us() + 2_000_000}, clock.now_us())
    clock.advance(1.999999)
    assert store.read_counts([member]) == [[(window, "us", 3)]]
    assert store.active("us", clock.now_us(), 10) == [member]
    clock.advance(0.000001)
    assert store.read_counts([member]) == [[]]
    assert store.active("us", clock.now_us(), 10) == [member]  # its time is now: still live
    clock.advance(0.000001)
    assert store.active("us", clock.now_us(), 10) == []
    store.publish_active("us", {}, clock.now_us())
    assert len(store.table) == 0, dict(store.table._states)


async def test_the_asyncio_store_answers_as_the_blocking_one() -> None:
    """AsyncMemoryRegionStore is MemoryRegionStore's methods, awaited: a random mix of
    budget Ops and exchange calls answers alike and leaves the same state."""
    rng = random.Random(7)
    clock = ManualClock(START)
    blocking, awaited = MemoryRegionStore(clock=clock), AsyncMemoryRegionStore(clock=clock)
    for number in range(300):
        if rng.random() < 0.2:
            _advance(rng, clock)
            continue
        if rng.random() < 0.5:
            state = rng.getstate()
            ops = _budget_ops(rng, blocking, clock.now_us())
            rng.setstate(state)
            assert _budget_ops(rng, awaited, clock.now_us()) == ops
            assert await awaited.apply_all(ops) == blocking.apply_all(ops), f"step {number}"
            continue
        method, args = _exchange_call(rng, clock.now_us())
        expected = getattr(blocking, method)(*args)
        assert await getattr(awaited, method)(*args) == expected, f"step {number}: {method}"
    assert await awaited.read_counts(list(MEMBERS)) == blocking.read_counts(list(MEMBERS))
    assert dict(awaited.table._states) == dict(blocking.table._states)
    assert await awaited.ping() and awaited.clock is blocking.clock is clock
    assert type(awaited).apply.__qualname__ == "AsyncMemoryRegionStore.apply"


def test_the_memory_stores_import_without_redis() -> None:
    """No [redis] extra: with redis unimportable, a reconciled budget and a demand exchange
    run on MemoryRegionStores."""
    code = """
import sys
sys.modules["redis"] = None  # any import of redis now fails
from ratewarden import Rate
from ratewarden.regions import DemandExchange, ReconciledBudget
from ratewarden.storage.memory_regions import MemoryRegionStore
from ratewarden.testing import ManualClock

clock = ManualClock()
stores = {name: MemoryRegionStore(clock=clock) for name in ("us", "eu")}
rates = {"us": Rate.parse("5/s"), "eu": Rate.parse("5/s")}
budget = ReconciledBudget("us", stores["us"], {"eu": stores["eu"]}, rates,
                          sync_interval=1.0, replication_lag=0.1)
assert budget.hit("k", Rate.parse("10/minute")).allowed
assert budget.sync().complete
DemandExchange("eu", stores).publish(1, 3)
assert DemandExchange("us", stores).collect(1) == ({"us": 0, "eu": 3}, ("us",))
assert not any(name == "redis" or name.startswith("redis.") for name in sys.modules
               if sys.modules[name] is not None)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
