"""Per-primary figures read from a real Cluster: who owns a slot, how many EVALSHA each ran."""

from __future__ import annotations

from ratewarden.storage._scripts import script
from tests._servers import RedisCluster, RedisServer


def primaries(cluster: RedisCluster) -> list[RedisServer]:
    """The nodes that are primaries now (all of them in a cluster without replicas)."""
    found = []
    for node in cluster.nodes:
        with node.client() as client:
            if client.info("replication")["role"] == "master":
                found.append(node)
    return found


def reset_stats(cluster: RedisCluster, algorithm: str = "gcra") -> None:
    """Load ``algorithm``'s script on every node, then zero its command statistics.

    With the script loaded everywhere, every decision is exactly one EVALSHA.
    """
    for node in cluster.nodes:
        with node.client() as client:
            client.script_load(script(algorithm).source)
            client.config_resetstat()


def evalsha_calls(cluster: RedisCluster) -> dict[int, int]:
    """EVALSHA calls each primary ran since the last reset, by port (``INFO commandstats``).

    Calls refused (NOSCRIPT, had a script not been loaded) are not decisions and
    are left out.
    """
    counts = {}
    for node in primaries(cluster):
        with node.client() as client:
            stats = client.info("commandstats").get("cmdstat_evalsha", {})
        counts[node.port] = int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))
    return counts


def slot_owner(cluster: RedisCluster, slot: int) -> int:
    """The port of the primary serving ``slot`` (``CLUSTER SLOTS``)."""
    with cluster.nodes[0].client() as client:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(primary[1])
    raise AssertionError(f"no primary serves slot {slot}")


def keyslot(cluster: RedisCluster, key: str) -> int:
    """The slot Redis itself computes for ``key`` (``CLUSTER KEYSLOT``)."""
    with cluster.nodes[0].client() as client:
        return int(client.execute_command("CLUSTER", "KEYSLOT", key))
