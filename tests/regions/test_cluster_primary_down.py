"""A Redis Cluster region with one primary down: the budget's script still runs on the
healthy primaries, even where it is not cached yet.

A primary that lacks the script (new, restarted, failed over, flushed) answers NOSCRIPT;
the store then sends the script to that primary alone. Loading it with SCRIPT LOAD, as
redis-py's ``Script`` does, goes to every primary of a Cluster, so one primary down made
every key of the healthy ones unavailable until each had cached the script.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.crc import key_slot

from ratewarden.rate import Rate
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster

pytestmark = pytest.mark.cluster

GLOBAL = Rate.parse("600/minute")
START = 1_700_000_040.0
WINDOW = int(START * 1_000_000) // GLOBAL.period_us


def _member(key: str) -> str:
    return f"{GLOBAL.limit}:{GLOBAL.period_us}:{key}"


def _home(client: redis.RedisCluster, store: RegionStore, member: str) -> Any:
    slot = key_slot(store.budget_key(member).encode())
    return client.nodes_manager.get_node_from_slot(slot)


def _flush_scripts(client: redis.RedisCluster, nodes: list[Any]) -> None:
    for node in nodes:
        client.execute_command("SCRIPT", "FLUSH", target_nodes=node)


async def test_a_script_runs_on_a_healthy_primary_that_lacks_it_while_another_is_down(
    own_cluster: RedisCluster,
) -> None:
    """One primary stopped, the others' script caches emptied: ``apply`` on a key of each
    healthy primary runs (the script sent to that primary alone), and so does ``apply_all``
    over keys of both, from both twins, each op once."""
    clock = ManualClock(START)
    store = RegionStore.from_url(own_cluster.url, timeout=1.0, clock=clock)
    astore = AsyncRegionStore.from_url(own_cluster.url, timeout=1.0, clock=clock)
    admin = own_cluster.client()
    try:
        primaries = admin.get_primaries()
        victim = next(n for n in primaries if n.port != own_cluster.nodes[0].port)
        healthy = [n for n in primaries if n.name != victim.name]
        members: dict[str, list[str]] = {node.name: [] for node in healthy}
        for member in (_member(f"k{i}") for i in range(200)):
            home = _home(admin, store, member).name
            if home in members and len(members[home]) < 3:
                members[home].append(member)
        assert all(len(found) == 3 for found in members.values())
        for twin in (store, astore):  # the slot table known before the stop
            reply = twin.read_counts([found[0] for found in members.values()])
            if twin is astore:
                await reply  # type: ignore[misc]
        next(n for n in own_cluster.nodes if n.port == victim.port).stop()
        for number, twin in enumerate((store, astore)):
            _flush_scripts(admin, healthy)
            for found in members.values():
                reply: Any = twin.apply(twin.budget_hit(found[number], "us", 2, 10))
                if twin is astore:
                    reply = await reply
                assert reply == [1, 2, 10, 60_000_000]
            _flush_scripts(admin, healthy)
            ops = [twin.budget_hit(found[2], "us", 1, 10) for found in members.values()]
            replies: Any = twin.apply_all(ops)
            if twin is astore:
                replies = await replies
            assert replies == [[1, number + 1, 10, 60_000_000]] * len(ops)
        counted = [found[2] for found in members.values()]
        assert store.read_counts(counted) == [[(WINDOW, "us", 2)]] * len(counted)
    finally:
        store.close()
        await astore.aclose()
        admin.close()
