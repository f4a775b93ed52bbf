"""Cells placed from the live slot map: read_slot_map / aread_slot_map on real Clusters (one
resharded for real), SlotMap.owners against CLUSTER KEYSLOT, and the live maps and clients that
give no bands (literal replies are in test_slotmap_replies.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import (
    CellLimiter,
    SlotMap,
    aread_slot_map,
    cell_keys,
    read_slot_map,
)
from ratewarden.storage._plan import build
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, RedisCluster, RedisServer
from tests.cluster._nodes import evalsha_calls, keyslot, reset_stats, slot_owner

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

#: The slots the reshard moves from the primary serving 5461-10922 to the one serving 0-5460:
#: both end up with two ranges, and the default middle band (6826-9556) mostly changes hands.
MOVED = (6000, 9000)
KEYS = [f"tenant:{n}" for n in range(60)]


# -- what the cluster itself says


def ownership(cluster: RedisCluster) -> dict[tuple[str, str], set[int]]:
    """Per primary (node id, ip:port), the slots it serves, from CLUSTER NODES; every node's
    view must agree."""
    views = []
    for node in cluster.nodes:
        with node.client() as client:
            text = client.execute_command("CLUSTER", "NODES").decode()
        owned: dict[tuple[str, str], set[int]] = {}
        for line in text.splitlines():
            ident, address, flags, *fields = line.split()
            if "master" not in flags.split(","):
                continue
            slots: set[int] = set()
            for item in fields[5:]:
                if not item.startswith("["):  # "[slot->-id]": a migration in flight
                    first, _, last = item.partition("-")
                    slots.update(range(int(first), int(last or first) + 1))
            if slots:
                owned[ident, address.split("@")[0]] = slots
        views.append(owned)
    if any(view != views[0] for view in views):
        differ = [
            (slot, [sorted(a for (_, a), held in view.items() if slot in held) for view in views])
            for slot in range(16384)
            if len({tuple(k for k, held in view.items() if slot in held) for view in views}) > 1
        ]
        raise AssertionError(f"the nodes disagree on {len(differ)} slots, e.g. {differ[:3]}")
    return views[0]


def served(slot_map: SlotMap) -> dict[tuple[str, str], set[int]]:
    """The same figure from a SlotMap."""
    owned: dict[tuple[str, str], set[int]] = {}
    for r in slot_map.ranges:
        owned.setdefault((r.node, r.address), set()).update(range(r.start, r.end))
    return owned


def real_owners(cluster: RedisCluster, cells: tuple[str, ...]) -> list[int]:
    """The port of the primary serving each cell's real state key (CLUSTER KEYSLOT, then
    CLUSTER SLOTS): what Redis does, not what SlotMap says."""
    rate = Rate.parse("300/second")
    return [
        slot_owner(cluster, keyslot(cluster, build("gcra", "rw", c, rate, 1).keys[0]))
        for c in cells
    ]


def port(address: str) -> int:
    return int(address.rpartition(":")[2])


def settled(cluster: RedisCluster) -> None:
    """Wait until every node's CLUSTER NODES agrees on who serves each slot."""
    deadline = time.monotonic() + 15
    while True:
        try:
            ownership(cluster)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def move(cluster: RedisCluster, slots: range, to: str) -> None:
    """Move the (empty) ``slots`` to node id ``to`` as ``redis-cli --cluster reshard`` does: the
    target imports them, the source migrates them, then every node is told the new owner, the
    target first (it takes an epoch above the rest, so no older claim wins in gossip)."""
    clients = [node.client() for node in cluster.nodes]
    try:
        ids = [client.execute_command("CLUSTER", "MYID").decode() for client in clients]
        source = node_id(cluster, slots[0])
        target = clients[ids.index(to)]
        order = [target, clients[ids.index(source)]]
        order += [client for client in clients if client not in order]
        steps = [(target, "IMPORTING", source), (order[1], "MIGRATING", to)]
        steps += [(client, "NODE", to) for client in order]
        for client, state, node in steps:
            pipe = client.pipeline(transaction=False)
            for slot in slots:
                pipe.execute_command("CLUSTER", "SETSLOT", slot, state, node)
            pipe.execute()
    finally:
        for client in clients:
            client.close()
    settled(cluster)


def node_id(cluster: RedisCluster, slot: int) -> str:
    """The node id of the primary serving ``slot`` (CLUSTER SLOTS)."""
    with cluster.nodes[0].client() as client:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return str(primary[2].decode())
    raise AssertionError(f"no primary serves slot {slot}")


def flush(cluster: RedisCluster) -> None:
    for node in cluster.nodes:
        with node.client() as client:
            client.flushall()


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Cluster of this module's own: its tests reshard it, unassign slots and
    change ACLs (each puts it back), so the session's cluster is never touched."""
    cluster = RedisCluster(primaries=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def resharded(own_cluster: RedisCluster) -> Iterator[RedisCluster]:
    """``own_cluster`` with slots 6000-8999 moved from the second primary to the first; moved
    back (emptied first) after the test."""
    flush(own_cluster)
    first, second = node_id(own_cluster, 0), node_id(own_cluster, MOVED[0])
    move(own_cluster, range(*MOVED), first)
    yield own_cluster
    flush(own_cluster)
    move(own_cluster, range(*MOVED), second)


# -- the live map, on the session's cluster


def test_the_map_read_is_the_ownership_every_node_states(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """read_slot_map gives each primary (node id and address) exactly the slots CLUSTER NODES
    gives it on every node, and one band per primary: its range, in slot order."""
    slot_map = read_slot_map(cluster_client)
    assert served(slot_map) == ownership(redis_cluster)
    assert slot_map.bands == ((0, 5461), (5461, 10923), (10923, 16384))
    assert slot_map.source == f"CLUSTER SHARDS of {cluster_client.get_default_node().name}"


@pytest.mark.parametrize(
    "options", [{"protocol": 2}, {"protocol": 3}, {"decode_responses": True}], ids=str
)
def test_every_reply_form_reads_the_same_map(
    redis_cluster: RedisCluster, options: dict[str, Any]
) -> None:
    """RESP2 (flat lists), RESP3 (maps), and decoded strings give one and the same map."""
    client = redis_cluster.client(**options)
    try:
        assert served(read_slot_map(client)) == ownership(redis_cluster)
    finally:
        client.close()


@pytest.mark.parametrize("key", ["tenant:big", "a{b}c%d", "é" * 40])
def test_cells_on_live_bands_sit_on_the_primary_of_their_band(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster, key: str
) -> None:
    """Cell i of live bands is served, by CLUSTER KEYSLOT of its state key and CLUSTER SLOTS,
    by the primary of band i; SlotMap.owners says the same; three cells, three primaries."""
    slot_map = read_slot_map(cluster_client)
    cells = cell_keys(key, 3, slot_map.bands)
    ports = real_owners(redis_cluster, cells)
    assert ports == [port(a) for a in slot_map.owners(cells)]
    assert ports == [slot_owner(redis_cluster, start) for start, _ in slot_map.bands]
    assert len(set(ports)) == 3


async def test_the_async_reader_reads_what_the_blocking_one_does(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """aread_slot_map on a fresh redis.asyncio.RedisCluster (not yet initialized) gives the
    map read_slot_map gives."""
    client = aredis.RedisCluster(host=HOST, port=redis_cluster.nodes[1].port)
    try:
        slot_map = await aread_slot_map(client)
    finally:
        await client.aclose()
    assert slot_map == read_slot_map(cluster_client)
    assert served(slot_map) == ownership(redis_cluster)


# -- after a real reshard


def test_after_a_reshard_a_primary_s_band_is_its_largest_range(resharded: RedisCluster) -> None:
    """Two primaries own two ranges each; the map has them all, as CLUSTER NODES does, and each
    primary's band is its largest range. CLUSTER SLOTS read raw gives the same map."""
    client = resharded.client()
    try:
        slot_map = read_slot_map(client)
        raw_slots = client.execute_command("CLUSTER", "SLOTS")
    finally:
        client.close()
    assert served(slot_map) == ownership(resharded)
    assert [(r.start, r.end) for r in slot_map.ranges] == [
        (0, 5461), (5461, 6000), (6000, 9000), (9000, 10923), (10923, 16384),
    ]  # fmt: skip
    assert slot_map.bands == ((0, 5461), (9000, 10923), (10923, 16384))
    assert SlotMap.from_slots(raw_slots) == slot_map


def test_after_a_reshard_default_bands_crowd_keys_and_live_bands_spread_them(
    resharded: RedisCluster,
) -> None:
    """With slots moved, some keys' 3 default cells sit on 2 primaries (by CLUSTER KEYSLOT and
    CLUSTER SLOTS, and by SlotMap.owners alike); the same keys' cells on live bands sit on 3."""
    client = resharded.client()
    try:
        slot_map = read_slot_map(client)
    finally:
        client.close()
    crowded = []
    for key in KEYS:
        default, live = cell_keys(key, 3), cell_keys(key, 3, slot_map.bands)
        assert real_owners(resharded, default) == [port(a) for a in slot_map.owners(default)]
        assert len(set(real_owners(resharded, live))) == 3
        if len(set(slot_map.owners(default))) < 3:
            crowded.append(key)
    assert len(crowded) > len(KEYS) // 4


def test_a_cell_limiter_on_live_bands_runs_on_every_primary_after_a_reshard(
    resharded: RedisCluster,
) -> None:
    """A crowded key's requests: on default bands one primary runs none of them; on
    CellLimiter(store, bands=read_slot_map(store.client).bands) every primary runs a third."""
    store = RedisStore(resharded.client(), clock=ManualClock(), timeout=1.0)
    slot_map = read_slot_map(store.client)
    key = next(k for k in KEYS if len(set(slot_map.owners(cell_keys(k, 3)))) < 3)
    rate = Rate.parse("900/second")
    try:
        for bands, idle in ((None, 1), (slot_map.bands, 0)):
            reset_stats(resharded)
            limiter = CellLimiter(store, 3, bands=bands)
            for _ in range(30):
                assert limiter.hit(key, rate).allowed
            calls = sorted(evalsha_calls(resharded).values())
            assert sum(calls) == 30
            assert calls.count(0) == idle
            assert idle or calls == [10, 10, 10]
    finally:
        store.close()
        store.client.close()


# -- maps that give no bands, and clients that have none


def test_a_server_that_refuses_cluster_shards_is_asked_cluster_slots(
    own_cluster: RedisCluster,
) -> None:
    """A user whose ACL denies CLUSTER SHARDS (as Redis 6.2, which does not know it, refuses it)
    reads the same map through CLUSTER SLOTS."""
    for node in own_cluster.nodes:
        with node.client() as client:
            client.execute_command(
                "ACL", "SETUSER", "mapper", "on", "nopass", "+@all", "~*", "-cluster|shards"
            )
    client = redis.RedisCluster(host=HOST, port=own_cluster.nodes[0].port, username="mapper")
    try:
        with pytest.raises(redis.ResponseError, match=r"cluster\|shards"):
            client.execute_command("CLUSTER", "SHARDS")
        slot_map = read_slot_map(client)
    finally:
        client.close()
        for node in own_cluster.nodes:
            with node.client() as admin:
                admin.execute_command("ACL", "DELUSER", "mapper")
    assert slot_map.source.startswith("CLUSTER SLOTS of ")
    assert served(slot_map) == ownership(own_cluster)


def test_unassigned_slots_are_refused_naming_them_and_the_node(own_cluster: RedisCluster) -> None:
    """Slots 100-199 served by nobody (as mid-failover): ConfigurationError naming the slots and
    the node asked; the cluster is left as it was."""
    owner = node_id(own_cluster, 100)
    client = own_cluster.client()  # made while every slot was served, as a running app's
    for node in own_cluster.nodes:
        with node.client() as admin:
            admin.execute_command("CLUSTER", "DELSLOTSRANGE", 100, 199)
    try:
        with pytest.raises(ConfigurationError, match=r"leaves slots 100-199 unserved") as caught:
            read_slot_map(client)
        assert client.get_default_node().name in str(caught.value)
    finally:
        client.close()
        for node in own_cluster.nodes:
            with node.client() as admin:
                if admin.execute_command("CLUSTER", "MYID").decode() == owner:
                    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 100, 199)
        settled(own_cluster)
    assert sum(len(slots) for slots in ownership(own_cluster).values()) == 16384


def test_a_failed_primary_is_refused_until_its_slots_are_taken_over() -> None:
    """A primary stopped, and marked failed by the others: the map read from a live node
    names its address and is refused (its slots are served by nobody until a failover)."""
    cluster = RedisCluster(primaries=3)
    try:
        live, dead = slot_owner(cluster, 0), slot_owner(cluster, 16383)
        asked = next(n for n in cluster.nodes if n.port == live)
        next(n for n in cluster.nodes if n.port == dead).stop()
        deadline = time.monotonic() + 20
        while not failed_in(asked) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert failed_in(asked), "the stopped primary was never marked failed"
        client = redis.RedisCluster(host=HOST, port=live)
        try:
            with pytest.raises(ConfigurationError, match=f"no working primary.*:{dead}"):
                read_slot_map(client)
        finally:
            client.close()
    finally:
        cluster.stop()


def failed_in(node: RedisServer) -> bool:
    with node.client() as client:
        text = client.execute_command("CLUSTER", "NODES").decode()
    return any("fail" in line.split()[2].split(",") for line in text.splitlines())


async def test_clients_that_are_not_a_cluster_of_their_kind_are_refused(
    redis_client: redis.Redis, cluster_client: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    """A standalone client, the other twin's cluster client or None: a ConfigurationError
    naming what was given and what to use."""
    async_client = aredis.RedisCluster(host=HOST, port=redis_cluster.nodes[0].port)
    try:
        with pytest.raises(ConfigurationError, match=r"not redis\.client\.Redis: only a Redis"):
            read_slot_map(redis_client)
        with pytest.raises(ConfigurationError, match="use aread_slot_map"):
            read_slot_map(async_client)
        with pytest.raises(ConfigurationError, match="use read_slot_map"):
            await aread_slot_map(cluster_client)
        with pytest.raises(ConfigurationError, match=r"not builtins\.NoneType"):
            await aread_slot_map(None)
    finally:
        await async_client.aclose()


async def test_a_store_over_a_cluster_is_read_through_its_client(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """read_slot_map(RedisStore.from_url("redis+cluster://...")) and aread_slot_map of an
    AsyncRedisStore over the Cluster read the map the stores' clients would: the same one."""
    expected = read_slot_map(cluster_client)
    store = RedisStore.from_url(redis_cluster.url, timeout=1.0)
    async_store = AsyncRedisStore.from_url(redis_cluster.url, timeout=1.0)
    try:
        assert read_slot_map(store) == expected
        assert await aread_slot_map(async_store) == expected
    finally:
        store.close()
        await async_store.aclose()


async def test_a_store_without_a_slot_map_is_refused_naming_store_and_client(
    redis_server: RedisServer, redis_cluster: RedisCluster
) -> None:
    """A store over a standalone server has no slot map: refused, naming the store, its client,
    and what is taken. A store of the other twin is told which reader to use."""
    standalone = RedisStore.from_url(redis_server.url, timeout=1.0)
    cluster = RedisStore.from_url(redis_cluster.url, timeout=1.0)
    try:
        message = (
            "read_slot_map needs a redis.RedisCluster client or a store over a Redis Cluster "
            "(redis+cluster://...), not ratewarden.storage.redis.RedisStore over "
            "redis.client.Redis: only a Redis Cluster has a slot map"
        )
        with pytest.raises(ConfigurationError, match=f"^{re.escape(message)}$"):
            read_slot_map(standalone)
        with pytest.raises(
            ConfigurationError,
            match=r"over redis\.cluster\.RedisCluster; for this one, use read_slot_map",
        ):
            await aread_slot_map(cluster)
    finally:
        standalone.close()
        cluster.close()
