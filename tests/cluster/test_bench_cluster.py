"""The Cluster benchmark's own cluster builder: 1 or 2 primaries, which redis-cli refuses."""

from __future__ import annotations

import pytest
import redis

from benchmarks._cluster import Cluster
from ratewarden import Rate
from ratewarden.storage.redis import RedisStore

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


@pytest.mark.parametrize("primaries", [1, 2])
def test_the_benchmark_cluster_serves_every_slot_and_stops_clean(primaries: int) -> None:
    """All 16,384 slots assigned, decisions on 200 keys land on every primary, and stop()
    ends the processes and removes their directories."""
    cluster = Cluster(primaries)
    try:
        with redis.Redis(host="127.0.0.1", port=cluster.ports[0]) as client:
            info = client.execute_command("CLUSTER", "INFO").decode()
        assert "cluster_slots_assigned:16384" in info
        cluster.reset_stats()
        store = RedisStore.from_url(cluster.url, timeout=1.0)
        assert all(store.hit("gcra", f"k{n}", Rate.parse("10/s")).allowed for n in range(200))
        store.close()
        calls = cluster.evalsha_calls()
        assert len(calls) == primaries and sum(calls) >= 200 and min(calls) > 0
    finally:
        cluster.stop()
    assert all(proc.poll() is not None for proc in cluster.procs)
    assert not any(path.exists() for path in cluster.dirs)
