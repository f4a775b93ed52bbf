"""A Redis Cluster per region: what a Cluster adds to the region stores, on real 3-primary
Clusters (one per region, and one of their own for the tests that move slots or stop a
primary).

The keys one script touches, and the two keys of one hit, share one slot (CLUSTER
KEYSLOT), so a decision runs on one primary and reads one clock; reads across slots
come back in the caller's order; a merge that a primary has no script for is sent
again; MOVED and ASK are followed; a primary that does not answer in time, or is down,
is a StorageUnavailableError naming the Cluster; and the blocking budget answers on
Clusters exactly as on servers.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from ratewarden.errors import StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.storage._keys import hash_tag
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster
from tests.regions._traffic import build_fleet
from tests.regions.conftest import Region

pytestmark = pytest.mark.cluster

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
GLOBAL = Rate.parse("600/minute")
START = 1_700_000_040.0  # a whole minute: the run starts at a window's start
WINDOW = int(START * 1_000_000) // GLOBAL.period_us
#: Keys whose hash tags need escaping, or look like tags themselves, beside plain ones.
KEYS = ("tenant-a", "tenant-b", "a{b}c", "{x}", "100%", "k:1:2", "}{", "tenant-c")


def _member(key: str) -> str:
    return f"{GLOBAL.limit}:{GLOBAL.period_us}:{key}"


def _homes(client: redis.RedisCluster) -> dict[str, str]:
    """Every key of the Cluster -> the primary that holds it."""
    return {
        key.decode(): node.name
        for node in client.get_primaries()
        for key in client.keys("*", target_nodes=node)
    }


def _flush_scripts(client: redis.RedisCluster) -> None:
    for node in client.get_primaries():
        client.execute_command("SCRIPT", "FLUSH", target_nodes=node)


def test_the_keys_of_one_hit_share_a_slot_and_a_primary(
    cluster_regions: dict[str, Region],
) -> None:
    """After hits and a round, each key's rate cap and window hash (the keys of its two
    scripts) hash to the slot of the key's tag, so they sit on one primary and a decision
    reads that primary's clock alone; the keys spread over every primary."""
    fleet = build_fleet(
        cluster_regions, RATES, sync_interval=1.0, replication_lag=1.0, clock=ManualClock(START)
    )
    us = fleet.budgets["us"]
    for key in KEYS:
        assert us.hit(key, GLOBAL).allowed
        assert fleet.budgets["eu"].hit(key, GLOBAL).allowed
    assert us.sync().complete
    client = cluster_regions["us"].local()
    homes = _homes(client)
    rate = RATES["us"]
    for key in KEYS:
        window_hash = us.local.budget_key(_member(key))
        rate_cap = f"rw:region-rate:{{{hash_tag(key)}}}:gcra:{rate.limit}:{rate.period_us}:1"
        slot = key_slot(hash_tag(key).encode())
        assert client.cluster_keyslot(window_hash) == client.cluster_keyslot(rate_cap) == slot
        assert homes[window_hash] == homes[rate_cap], key
        assert client.hget(window_hash, "c:eu") == b"1", key  # merged from eu's Cluster
    assert len({homes[us.local.budget_key(_member(key))] for key in KEYS}) == 3


async def test_reads_across_slots_come_back_in_the_callers_order(
    cluster_regions: dict[str, Region],
) -> None:
    """Thirty members on all three primaries, read in a shuffled order with one never
    written: each answer is that member's window hash, in the order asked, from both twins."""
    store = RegionStore(cluster_regions["us"].local(), clock=ManualClock(START))
    members = [_member(f"t{i}") for i in range(30)]
    for count, member in enumerate(members, start=1):
        assert store.apply(store.budget_hit(member, "us", count, 1000))[0] == 1
    homes = _homes(store.client)  # type: ignore[arg-type]
    assert len({homes[store.budget_key(member)] for member in members}) == 3
    asked = [*random.Random(7).sample(members, len(members)), _member("never")]
    expected = [[(WINDOW, "us", members.index(m) + 1)] for m in asked[:-1]] + [[]]
    assert store.read_counts(asked) == expected
    astore = AsyncRegionStore(cluster_regions["us"].alocal(), clock=ManualClock(START))
    try:
        assert await astore.read_counts(asked) == expected
    finally:
        await astore.client.aclose()


async def test_a_merge_a_primary_has_no_script_for_is_sent_again(
    cluster_regions: dict[str, Region],
) -> None:
    """Every primary's script cache emptied (as a restart or failover leaves it): a round's
    merges over keys on all primaries still run, each once, from both twins."""
    clock = ManualClock(START)
    store = RegionStore(cluster_regions["us"].local(), clock=clock)
    astore = AsyncRegionStore(cluster_regions["us"].alocal(), clock=clock)
    members = [_member(f"m{i}") for i in range(12)]
    for member in members:
        store.apply(store.budget_hit(member, "us", 2, 100))
    try:
        for twin, peer in ((store, "eu"), (astore, "ap")):
            _flush_scripts(store.client)  # type: ignore[arg-type]
            ops = [twin.budget_merge(m, "us", (1, 2), True, [(WINDOW, peer, 4)]) for m in members]
            replies = twin.apply_all(ops)
            if twin is astore:
                replies = await replies  # type: ignore[misc]
            total = 6 if peer == "eu" else 10  # us 2 + eu 4 (+ ap 4 on the second round)
            assert replies == [[WINDOW, total, 2, 2 + (600 - total) // 2]] * len(members)
    finally:
        await astore.client.aclose()


def _steps(seed: int, count: int) -> Iterator[tuple[Any, ...]]:
    """Hits (some over a cap or a budget), clock steps, and rounds whole or split in two."""
    rng = random.Random(seed)
    fetched: set[str] = set()
    for _ in range(count):
        region = rng.choice(("us", "eu", "ap"))
        roll = rng.random()
        if roll < 0.6:
            yield ("hit", region, rng.choice(KEYS), rng.choice((0, 1, 1, 3, 40)))
        elif roll < 0.75:
            yield ("advance", rng.choice((0.01, 0.1, 0.5, 1.0, 7.0)))
        elif roll < 0.87:
            yield ("sync", region)
        else:
            yield ("apply" if region in fetched else "fetch", region)
            fetched ^= {region}


def test_the_blocking_budget_answers_on_clusters_exactly_as_on_servers(
    regions: dict[str, Region], cluster_regions: dict[str, Region]
) -> None:
    """One random sequence through a fleet on three servers, one on three Clusters and one
    with us on a Cluster and its peers on servers (under a prefix of its own), on one
    ManualClock: the same Decisions, views and sync reports at every step."""
    clock = ManualClock(START)
    options: dict[str, Any] = {"sync_interval": 1.0, "replication_lag": 0.3, "clock": clock}
    mixed = {**regions, "us": cluster_regions["us"]}
    fleets = [
        build_fleet(regions, RATES, **options),
        build_fleet(cluster_regions, RATES, **options),
        build_fleet(mixed, RATES, prefix="mixed", **options),
    ]
    views: dict[str, list[Any]] = {}
    allowed = 0
    for number, step in enumerate(_steps(5, 300)):
        if step[0] == "advance":
            clock.advance(step[1])
            continue
        budgets = [fleet.budgets[step[1]] for fleet in fleets]
        if step[0] == "hit":
            answers: list[Any] = [b.hit(step[2], GLOBAL, step[3]) for b in budgets]
            allowed += answers[0].allowed
        elif step[0] == "sync":
            answers = [b.sync() for b in budgets]
        elif step[0] == "fetch":
            answers = views[step[1]] = [b.fetch() for b in budgets]
        else:
            pending = views.pop(step[1])
            answers = [b.apply(view) for b, view in zip(budgets, pending, strict=True)]
        assert answers[0] == answers[1] == answers[2], f"step {number}: {step}"
    assert allowed > 20


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Cluster of the test's own, which moves its slots or stops a primary (on a
    shared one, the next test would depend on which ran first)."""
    cluster = RedisCluster(primaries=3)
    try:
        yield cluster
    finally:
        cluster.stop()


def _owner(client: redis.RedisCluster, key: str) -> Any:
    return client.nodes_manager.get_node_from_slot(key_slot(hash_tag(key).encode()))


def _node_id(client: redis.RedisCluster, node: Any) -> str:
    node_id: Any = client.execute_command("CLUSTER", "MYID", target_nodes=node)
    return node_id.decode() if isinstance(node_id, bytes) else str(node_id)


async def test_moved_and_ask_are_followed(own_cluster: RedisCluster) -> None:
    """A slot table gone stale (MOVED) and a slot being migrated (ASK, then MOVED once it
    has moved): the budget's hit and merge and the exchange's reads answer as if nothing
    moved, from both twins, and the keys end on the slot's new primary."""
    clock = ManualClock(START)
    store = RegionStore.from_url(own_cluster.url, timeout=1.0, clock=clock)
    astore = AsyncRegionStore.from_url(own_cluster.url, timeout=1.0, clock=clock)
    admin = own_cluster.client()
    stale, moving = "stale-table", "moving-slot"
    right = _owner(admin, stale)
    wrong = next(n for n in admin.get_primaries() if n.name != right.name)
    slot = key_slot(hash_tag(stale).encode())
    try:
        assert store.apply(store.budget_hit(_member(stale), "us", 3, 10))[0] == 1
        for twin in (store, astore):
            for call in (
                lambda t=twin: t.apply(t.budget_hit(_member(stale), "us", 0, 10)),
                lambda t=twin: t.read_counts([_member(stale)]),
                lambda t=twin: t.apply_all(
                    [t.budget_merge(_member(stale), "us", (1, 1), False, [])]
                ),
            ):
                await _answer(twin.read_counts([_member(stale)]))  # the table known first
                twin.client.nodes_manager.slots_cache[slot] = [
                    next(n for n in twin.client.get_primaries() if n.name == wrong.name)
                ]
                reply = await _answer(call())
                assert reply in (
                    [1, 3, 10, 60_000_000],
                    [[(WINDOW, "us", 3)]],
                    [[WINDOW, 3, 3, -1]],
                )
        source = _owner(admin, moving)
        target = next(n for n in admin.get_primaries() if n.name != source.name)
        slot = key_slot(hash_tag(moving).encode())
        source_id, target_id = _node_id(admin, source), _node_id(admin, target)
        admin.execute_command(
            "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id, target_nodes=target
        )
        admin.execute_command(
            "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id, target_nodes=source
        )
        assert store.hit("gcra", moving, RATES["us"]).allowed  # the rate cap's key: ASK
        assert store.apply(store.budget_hit(_member(moving), "us", 1, 10))[0] == 1  # ASK
        assert await astore.apply(astore.budget_hit(_member(moving), "us", 1, 10)) == [
            1,
            2,
            10,
            60_000_000,
        ]
        for node in admin.get_primaries():
            admin.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id, target_nodes=node)
        assert store.read_counts([_member(moving)]) == [[(WINDOW, "us", 2)]]  # MOVED
        assert await astore.read_counts([_member(moving)]) == [[(WINDOW, "us", 2)]]
        assert _homes(admin)[store.budget_key(_member(moving))] == target.name
    finally:
        store.close()
        await astore.aclose()
        admin.close()


async def _answer(reply: Any) -> Any:
    """A twin's answer: awaited when it is a coroutine."""
    if hasattr(reply, "__await__"):
        return await reply
    return reply


async def test_a_primary_too_slow_or_down_is_storage_unavailable(
    own_cluster: RedisCluster,
) -> None:
    """A primary paused past the timeout, then stopped: every call of both twins that needs
    it raises StorageUnavailableError naming the Cluster (its timeout, or that it is
    unavailable), never a redis-py error; keys on the other primaries still answer."""
    clock = ManualClock(START)
    store = RegionStore.from_url(own_cluster.url, timeout=0.2, clock=clock)
    astore = AsyncRegionStore.from_url(own_cluster.url, timeout=0.2, clock=clock)
    admin = own_cluster.client()
    victim = _owner(admin, "victim")
    alive = next(
        k for k in (f"alive-{i}" for i in range(50)) if _owner(admin, k).name != victim.name
    )
    member = _member("victim")
    where = "Redis Cluster 127.0.0.1:"

    def calls(twin: Any) -> dict[str, Any]:
        return {
            "apply": lambda: twin.apply(twin.budget_hit(member, "us", 1, 10)),
            "apply_all": lambda: twin.apply_all([twin.budget_hit(member, "us", 1, 10)]),
            "read_counts": lambda: twin.read_counts([_member(alive), member]),
            "hit": lambda: twin.hit("gcra", "victim", RATES["us"]),
        }

    try:
        for twin in (store, astore):  # the slot table known first: the pause is then the only delay
            await _answer(twin.read_counts([member]))
        admin.execute_command("CLIENT", "PAUSE", 3000, "ALL", target_nodes=victim)
        paused = time.monotonic()
        for twin in (store, astore):
            for name, call in calls(twin).items():
                # The rate cap is RedisStore's, whose new connection times out in its handshake.
                said = "is unavailable" if name == "hit" else r"did not answer within 0\.2 s"
                with pytest.raises(StorageUnavailableError, match=said):
                    await _answer(call())
                    pytest.fail(f"{name} did not raise")
        time.sleep(max(0.0, 3.1 - (time.monotonic() - paused)))
        assert await _answer(astore.read_counts([member])) == [[]]
        next(n for n in own_cluster.nodes if n.port == victim.port).stop()
        for twin in (store, astore):
            for name, call in calls(twin).items():
                with pytest.raises(StorageUnavailableError, match=where) as raised:
                    await _answer(call())
                    pytest.fail(f"{name} did not raise")
                assert "unavailable" in str(raised.value) or "did not answer" in str(raised.value)
            assert (await _answer(twin.apply(twin.budget_hit(_member(alive), "us", 1, 10))))[0] == 1
    finally:
        store.close()
        await astore.aclose()
        admin.close()
