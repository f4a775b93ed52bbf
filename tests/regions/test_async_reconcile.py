"""AsyncReconciledBudget against ReconciledBudget: one sequence, both twins, identical answers.

Equal setups: the same three redis-servers and cross-region links (or the same three
Redis Clusters, one per region), the same ManualClock, the blocking twin's keys under
the prefix ``s`` and the asyncio twin's under ``a``. Every step runs on both at the
same instant; the tests demand identical Decisions, PeerViews, SyncReports (or the
same error), the same overshoot reports, and the same state in each Redis.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from ratewarden.errors import StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.regions import AsyncReconciledBudget, PeerView, ReconciledBudget
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests.faults._proxy import Fault
from tests.regions._traffic import build_async_fleet, build_fleet
from tests.regions._twins import build_twins, labels, random_steps
from tests.regions.conftest import Region, all_keys, set_latency

RATES = {
    "us": Rate.parse("5/s", burst=2),
    "eu": Rate.parse("3/s", burst=1),
    "ap": Rate.parse("2/s", burst=1),
}
GLOBALS = (Rate.parse("40/minute"), Rate.parse("12/s"))
#: What the random sequences hit with: each global rate alone, and both as one layered limit.
HITS = (*GLOBALS, GLOBALS)
START = 1_700_000_040.0  # a whole minute: the run starts at a window's start


def _state(client: redis.Redis | redis.RedisCluster, prefix: str) -> dict[str, Any]:
    """Every key under ``prefix`` (on every primary of a Cluster) with its content, the
    prefix cut off."""
    found: dict[str, Any] = {}
    for raw in all_keys(client, f"{prefix}:*"):
        key = raw.decode()
        kind = client.type(key).decode()
        if kind == "hash":
            value: Any = client.hgetall(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        else:
            value = client.get(key)
        found[key.removeprefix(prefix)] = (kind, value)
    return found


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_sequences_give_identical_answers_and_state(
    regions: dict[str, Region], seed: int
) -> None:
    """Hits, clock steps, rounds (some applied after the lag, so stale) and peers' links
    reset and healed: every step's answer is the same from both twins (Decision, PeerView,
    SyncReport, or the same error), so are the overshoot reports, and each Redis holds the
    same state under both prefixes."""
    clock = ManualClock(START)
    twins = build_twins(
        regions, RATES, clock, sync_interval=1.0, replication_lag=0.3, link_timeout=0.5
    )
    kinds: dict[str, int] = {}
    try:
        for number, step in enumerate(random_steps(seed, 400, HITS)):
            blocking, awaited = await twins.step(step)
            assert blocking == awaited, f"step {number}: {step}"
            for label in labels(step, blocking):
                kinds[label] = kinds.get(label, 0) + 1
        assert twins.first.metrics.reports == twins.second.metrics.reports
        for region in regions.values():
            with region.local() as client:
                assert _state(client, "s") == _state(client, "a")
    finally:
        await twins.second.aclose()
    # The sequence reached what it is meant to compare: denials, failed peers, stale rounds.
    print(f"\n[regions] async twin, seed {seed}: {dict(sorted(kinds.items()))}")
    for label in ("allowed", "denied", "complete", "failed peer", "stale"):
        assert kinds.get(label, 0) > 0, label


@pytest.mark.cluster
@pytest.mark.parametrize("seed", [1, 2])
async def test_random_sequences_on_a_cluster_per_region_give_identical_answers_and_state(
    cluster_regions: dict[str, Region], seed: int
) -> None:
    """The random sequences above, but for the links' faults (a Cluster region has no proxy),
    with a Redis Cluster in each region: the same answers from both twins, the same overshoot
    reports and the same state on every primary under both prefixes."""
    clock = ManualClock(START)
    twins = build_twins(
        cluster_regions, RATES, clock, sync_interval=1.0, replication_lag=0.3, link_timeout=0.5
    )
    kinds: dict[str, int] = {}
    try:
        for number, step in enumerate(random_steps(seed, 300, HITS, faults=False)):
            blocking, awaited = await twins.step(step)
            assert blocking == awaited, f"step {number}: {step}"
            for label in labels(step, blocking):
                kinds[label] = kinds.get(label, 0) + 1
        assert twins.first.metrics.reports == twins.second.metrics.reports
        for region in cluster_regions.values():
            with region.local() as client:
                state = _state(client, "s")
                assert state == _state(client, "a") and state
    finally:
        await twins.second.aclose()
    print(f"\n[regions] async twin on Clusters, seed {seed}: {dict(sorted(kinds.items()))}")
    for label in ("allowed", "denied", "complete", "stale"):
        assert kinds.get(label, 0) > 0, label


async def test_staggered_rounds_give_the_same_admissions_within_the_bound(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """The staggered schedule of test_reconcile (rounds a third of an interval apart, each
    applied ``lag`` after its read, every region over its cap) through both twins: the same
    Decision at every step, and the window's admissions within the bound; on a Cluster per
    region as on one server, and in this process."""
    regions = any_regions_or_memory
    set_latency(regions, 0.002)
    rates = {
        "us": Rate.parse("30/s", burst=1),
        "eu": Rate.parse("20/s", burst=1),
        "ap": Rate.parse("10/s", burst=1),
    }
    limit = Rate.parse("600/minute")
    clock = ManualClock(START)
    options = {"sync_interval": 1.0, "replication_lag": 0.2, "clock": clock}
    sync = build_fleet(regions, rates, prefix="s", **options)  # type: ignore[arg-type]
    awaited = build_async_fleet(regions, rates, prefix="a", **options)  # type: ignore[arg-type]
    offsets = {"us": 0.0, "eu": 0.33, "ap": 0.66}
    pending: dict[str, tuple[float, PeerView, PeerView]] = {}
    admitted = 0
    tick = 0.02
    try:
        for step in range(int(14 / tick)):
            now = step * tick
            for name, offset in offsets.items():
                if name in pending and now >= pending[name][0]:
                    _, view, aview = pending.pop(name)
                    assert sync.budgets[name].apply(view) == await awaited.budgets[name].apply(
                        aview
                    )
                phase = (now - offset) % 1.0
                if name not in pending and (phase < tick / 2 or phase > 1.0 - tick / 2):
                    view = sync.budgets[name].fetch()
                    aview = await awaited.budgets[name].fetch()
                    assert view == aview
                    pending[name] = (now + 0.2, view, aview)
            for name in offsets:
                decision = sync.budgets[name].hit("tenant-a", limit)
                assert decision == await awaited.budgets[name].hit("tenant-a", limit)
                admitted += decision.allowed
            clock.advance(tick)
    finally:
        await awaited.aclose()
    print(f"\n[regions] staggered, both twins: admitted {admitted} of 600, bound {sync.bound}")
    assert admitted - limit.limit <= sync.bound
    assert admitted >= limit.limit * 0.9


async def test_a_peer_down_leaves_both_twins_caps_as_they_were(regions: dict[str, Region]) -> None:
    """ap's Redis unreachable (its link black-holed): both twins' rounds are incomplete, name
    ap, merge what arrived and leave the cap unset; once it is back both complete again."""
    clock = ManualClock(START)
    twins = build_twins(
        regions, RATES, clock, sync_interval=1.0, replication_lag=5.0, link_timeout=0.2
    )
    try:
        for _ in range(5):
            blocking, awaited = await twins.step(("hit", "eu", "tenant-c", GLOBALS[0], 1))
            assert blocking == awaited and blocking[1].allowed
            clock.advance(0.4)  # past eu's rate cap of 3/s
        # eu publishes the key it used; us has not merged it yet, so has no cap of its own.
        assert (await twins.step(("sync", "eu")))[0][1].complete
        regions["ap"].link.set_fault(Fault.BLACKHOLE)
        blocking, awaited = await twins.step(("sync", "us"))
        assert blocking == awaited
        assert (blocking[1].complete, blocking[1].failed, blocking[1].keys) == (False, ("ap",), 1)
        member = f"{GLOBALS[0].limit}:{GLOBALS[0].period_us}:tenant-c"
        with regions["us"].local() as client:
            for twin in (twins.first, twins.second):
                stored = client.hgetall(twin.budgets["us"]._hash_key(member))
                assert stored.get(b"c:eu") == b"5" and b"cap" not in stored, stored
        regions["ap"].link.set_fault(Fault.NONE)
        blocking, awaited = await twins.step(("sync", "us"))
        assert blocking == awaited and blocking[1].complete
    finally:
        await twins.second.aclose()


async def test_this_regions_redis_down_fails_both_twins_alike(regions: dict[str, Region]) -> None:
    """The region's own Redis unreachable (its link resets): a hit raises
    StorageUnavailableError from both twins, naming the server, and so does a round."""
    us = regions["us"]
    clock = ManualClock(START)

    def sync_store(name: str) -> RegionStore:
        client = regions[name].remote(0.2, retries=0)
        return RegionStore(client, clock=clock, timeout=0.2, prefix="s")

    def async_store(name: str) -> AsyncRegionStore:
        client = regions[name].aremote(0.2, retries=0)
        return AsyncRegionStore(client, clock=clock, timeout=0.2, prefix="a")

    options: dict[str, Any] = {"sync_interval": 1.0, "replication_lag": 1.0}
    blocking = ReconciledBudget(
        "us", sync_store("us"), {"eu": sync_store("eu"), "ap": sync_store("ap")}, RATES, **options
    )
    awaited = AsyncReconciledBudget(
        "us",
        async_store("us"),
        {"eu": async_store("eu"), "ap": async_store("ap")},
        RATES,
        **options,
    )
    try:
        assert blocking.hit("k", GLOBALS[0]) == await awaited.hit("k", GLOBALS[0])
        us.link.set_fault(Fault.RESET)
        for call, acall in (
            (lambda: blocking.hit("k", GLOBALS[0]), lambda: awaited.hit("k", GLOBALS[0])),
            (blocking.sync, awaited.sync),
        ):
            with pytest.raises(StorageUnavailableError) as sync_error:
                call()
            with pytest.raises(StorageUnavailableError) as async_error:
                await acall()
            assert type(sync_error.value) is type(async_error.value)
            # The same words around the client's own detail (which the reset's timing picks).
            for error in (sync_error.value, async_error.value):
                assert str(error).startswith(f"Redis at 127.0.0.1:{us.link.port} is unavailable")
                assert str(error).endswith("the failure mode decides what to do")
    finally:
        us.link.set_fault(Fault.NONE)
        for store in (awaited.local, *awaited.peers.values()):
            await store.aclose()
            await store.client.aclose()
