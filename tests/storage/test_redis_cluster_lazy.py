"""The blocking Cluster store connects at its first call, not in from_url.

An unreachable Cluster is then an outage of that call (the failure mode answers), the
next call tries again, and a store never used makes no connection at all. Settings are
still refused where they are given, in from_url.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest
import redis

from ratewarden import Limiter, Rate
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.storage.redis import RedisStore
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT, RedisCluster, RedisServer, free_port

pytestmark = pytest.mark.redis

RATE = Rate.parse("100/minute", burst=20)
#: How long a one-node Cluster may take to say cluster_state:ok once its slots are given.
CLUSTER_OK_S = 10.0


def one_node_cluster(port: int) -> RedisServer:
    """A Cluster of one primary serving every slot, listening on ``port``."""
    node = RedisServer(
        ["cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000"],
        port=port,
    )
    with node.client() as admin:
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + CLUSTER_OK_S
        while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
            if time.monotonic() > deadline:
                node.stop()
                raise RuntimeError(f"the one-node Cluster on {port} did not reach ok")
            time.sleep(0.02)
    return node


def connections_received(admins: list[redis.Redis]) -> int:
    """Connections the nodes accepted so far (the admins' own, already open, counted once)."""
    return sum(int(admin.info("stats")["total_connections_received"]) for admin in admins)


def cluster_slots_calls(admins: list[redis.Redis]) -> int:
    """CLUSTER SLOTS commands the nodes ran so far: how a redis-py Cluster client is made."""
    calls = 0
    for admin in admins:
        stats: dict[str, Any] = admin.info("commandstats")
        calls += int(stats.get("cmdstat_cluster|slots", {}).get("calls", 0))
    return calls


def test_from_url_on_a_cluster_nobody_listens_on_builds_the_store() -> None:
    """Nothing listens at the URL: from_url returns a store (it used to raise
    StorageUnavailableError); its calls are the outage: StorageUnavailableError naming the
    node, ping False, and a Limiter's failure mode answers."""
    port = free_port()
    store = RedisStore.from_url(f"redis+cluster://{HOST}:{port}", timeout=0.05)
    try:
        assert f"Redis Cluster {HOST}:{port}" in repr(store)
        with pytest.raises(StorageUnavailableError, match=f"{HOST}:{port}"):
            store.hit("gcra", "k", RATE)
        with pytest.raises(StorageUnavailableError):
            store.hit("gcra", "k", RATE)  # tried again, not a failure kept from before
        assert store.ping() is False
        assert store.node_of("k") == ""
        opened = Limiter(store, failure_mode="open").hit("k", RATE)
        assert (opened.allowed, opened.degraded) == (True, "open")
        closed = Limiter(store, failure_mode="closed").hit("k", RATE)
        assert (closed.allowed, closed.degraded) == (False, "closed")
    finally:
        store.close()


def test_the_same_store_decides_once_a_cluster_listens_at_its_url() -> None:
    """A store (and a region store) built while nothing listened fail their first calls;
    once a Cluster serves that port, the same stores decide, on the same client object,
    without being rebuilt: a failed connect is tried again at the next call."""
    port = free_port()
    url = f"redis+cluster://{HOST}:{port}"
    clock = ManualClock()
    store = RedisStore.from_url(url, clock=clock, timeout=STORE_TIMEOUT)
    region = RegionStore.from_url(url, clock=clock, timeout=STORE_TIMEOUT)
    client = store.client
    with pytest.raises(StorageUnavailableError):
        store.hit("gcra", "k", RATE)
    with pytest.raises(StorageUnavailableError):
        region.publish_demand("eu", 7, 3)
    node = one_node_cluster(port)
    try:
        assert store.hit("gcra", "k", RATE).remaining == 19
        assert store.hit("gcra", "k", RATE).remaining == 18
        assert store.client is client
        assert store.node_of("k") == f"{HOST}:{port}"
        assert store.ping() is True
        region.publish_demand("eu", 7, 3)
        assert region.demand("eu", 7) == 3
        assert region.hit("gcra", "k", RATE).remaining == 19
    finally:
        store.close()
        region.close()
        node.stop()


@pytest.mark.cluster
def test_a_store_never_used_makes_no_connection_even_when_closed(
    redis_cluster: RedisCluster,
) -> None:
    """from_url, close and garbage collection of a store (and a region store) that made no
    call open no connection to any node of a listening Cluster."""
    admins = [node.client() for node in redis_cluster.nodes]
    try:
        before = connections_received(admins)
        store = RedisStore.from_url(redis_cluster.url, timeout=STORE_TIMEOUT)
        region = RegionStore.from_url(redis_cluster.url, timeout=STORE_TIMEOUT)
        assert isinstance(store.client, redis.RedisCluster)
        store.close()
        region.close()
        del store, region
        gc.collect()
        assert connections_received(admins) == before
    finally:
        for admin in admins:
            admin.close()


@pytest.mark.cluster
def test_threads_making_the_first_calls_at_once_make_one_client(
    redis_cluster: RedisCluster,
) -> None:
    """from_url reads no slot table; eight threads' first calls at once read it once: the
    client is made under a lock, by one of them, and every call decides."""
    admins = [node.client() for node in redis_cluster.nodes]
    before = cluster_slots_calls(admins)
    store = RedisStore.from_url(redis_cluster.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    try:
        assert cluster_slots_calls(admins) == before
        start = threading.Barrier(8)
        remaining: list[int] = []

        def first_call(i: int) -> None:
            start.wait(timeout=10)
            remaining.append(store.hit("gcra", f"thread-{i}", RATE).remaining)

        threads = [threading.Thread(target=first_call, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert remaining == [19] * 8
        assert cluster_slots_calls(admins) - before == 1
    finally:
        store.close()
        for admin in admins:
            admin.close()


BAD_OPTIONS = [
    ({"no_such_option": 1}, "RedisCluster takes no option 'no_such_option'"),
    ({"max_connections": -1}, "max_connections"),
    ({"db": 1}, "database 0 only"),
    ({"unix_socket_path": "/tmp/redis.sock"}, "over TCP"),
    ({"socket_read_size": "x"}, "string argument without an encoding"),
]


@pytest.mark.parametrize(("options", "words"), BAD_OPTIONS)
def test_bad_client_options_are_refused_at_from_url_not_at_the_first_call(
    options: dict[str, Any], words: str
) -> None:
    """Options the Cluster client would find bad only while it connects are a
    ConfigurationError from from_url (they used to be a StorageUnavailableError there, or
    dropped without a word), for RedisStore and RegionStore alike."""
    url = f"redis+cluster://{HOST}:{free_port()}"
    for store_class in (RedisStore, RegionStore):
        with pytest.raises(ConfigurationError, match="rejected an option") as caught:
            store_class.from_url(url, **options)
        assert words in str(caught.value)
