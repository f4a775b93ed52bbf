"""Three regions on loopback: three real redis-servers, each reachable from the others
only through a latency-injecting TCP proxy (tests/faults/_proxy.py), the cross-region link;
or three real 3-primary Redis Clusters, one per region (``any_regions``); or three regions
in this process, each a MemoryRegionStore (``memory_regions``, and
``any_regions_or_memory`` for the three kinds).

A Cluster region is reached directly, from its own region and from the others: a Cluster
client follows the slot table to every primary, which one proxy cannot stand in for, so
its links here take no latency and no faults (``_cluster_links.ClusterLink`` puts a proxy
in front of every node, for the tests of faults on Cluster links). A region in this
process has no link at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewarden.clock import Clock
from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
from tests._servers import HOST, RedisCluster, RedisServer
from tests.faults._proxy import Fault, FaultProxy

REGIONS = ("us", "eu", "ap")


Client = Any  # redis.Redis, or redis.RedisCluster for a Cluster region
AsyncClient = Any  # the same from redis.asyncio


@dataclass
class Region:
    """One region: its Redis (a server, or a Cluster; None for a region in this process),
    and the proxy other regions reach a server through (None for a Cluster: see the module)."""

    name: str
    server: RedisServer | RedisCluster | None
    link: FaultProxy | None = None
    #: A region in this process: its stores, one per (prefix, twin), made on first use.
    stores: dict[tuple[str, bool], Any] = field(default_factory=dict)

    @property
    def in_memory(self) -> bool:
        """Whether the region is in this process (MemoryRegionStores), not on Redis."""
        return self.server is None

    def memory_store(self, clock: Clock, *, prefix: str = "rw", awaited: bool = False) -> Any:
        """This in-process region's store, "its Redis": one object for every budget and
        exchange of the test that asks with ``prefix``, its own and the other regions'. The
        first caller's ``clock`` sets its windows; every later one must bring the same."""
        assert self.in_memory, f"region {self.name} is on Redis"
        kind = AsyncMemoryRegionStore if awaited else MemoryRegionStore
        store = self.stores.setdefault((prefix, awaited), kind(clock=clock, prefix=prefix))
        assert store.clock is clock, "one in-process region, one clock"
        return store

    def local(self) -> Client:
        """A client in the region itself (no proxy)."""
        return _server(self).client()

    def remote(self, timeout: float = 1.0, *, retries: int | None = None) -> Client:
        """A client in another region: every byte crosses the latency proxy. ``retries``:
        how often a failed call is tried again, at once (default: redis-py's policy)."""
        options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if retries is not None:
            options["retry"] = Retry(NoBackoff(), retries)
        server = _server(self)
        if isinstance(server, RedisCluster):
            return redis.RedisCluster(host=HOST, port=server.nodes[0].port, **options)
        assert self.link is not None
        return redis.Redis(host=HOST, port=self.link.port, **options)

    def alocal(self) -> AsyncClient:
        """``local`` for asyncio: a redis.asyncio client in the region itself."""
        server = _server(self)
        if isinstance(server, RedisCluster):
            return aredis.RedisCluster(host=HOST, port=server.nodes[0].port)
        return aredis.Redis(host=HOST, port=server.port)

    def aremote(self, timeout: float = 1.0, *, retries: int | None = None) -> AsyncClient:
        """``remote`` for asyncio: a redis.asyncio client across the latency proxy."""
        options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if retries is not None:
            options["retry"] = AsyncRetry(NoBackoff(), retries)
        server = _server(self)
        if isinstance(server, RedisCluster):
            return aredis.RedisCluster(host=HOST, port=server.nodes[0].port, **options)
        assert self.link is not None
        return aredis.Redis(host=HOST, port=self.link.port, **options)


def _server(region: Region) -> RedisServer | RedisCluster:
    assert region.server is not None, f"region {region.name} is in this process"
    return region.server


def all_keys(client: Client, pattern: str = "*") -> list[bytes]:
    """Every key matching ``pattern`` on the server, or on every primary of a Cluster."""
    if isinstance(client, redis.RedisCluster):
        return list(client.keys(pattern, target_nodes=redis.RedisCluster.PRIMARIES))
    return list(client.keys(pattern))


@pytest.fixture(scope="session")
def region_servers() -> Iterator[dict[str, RedisServer]]:
    """Three redis-servers, one per region, for the whole session."""
    servers: dict[str, RedisServer] = {}
    try:
        for name in REGIONS:
            servers[name] = RedisServer()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture
def regions(region_servers: dict[str, RedisServer]) -> Iterator[dict[str, Region]]:
    """The three regions, emptied, each behind a fresh healthy proxy (set latency per test)."""
    made: dict[str, Region] = {}
    try:
        for name, server in region_servers.items():
            with server.client() as client:
                client.flushall()
            made[name] = Region(name, server, FaultProxy(server.port))
        yield made
    finally:
        for region in made.values():
            region.link.close()


@pytest.fixture(scope="session")
def region_clusters(redis_cluster: RedisCluster) -> Iterator[dict[str, RedisCluster]]:
    """Three 3-primary Redis Clusters, one per region, for the whole session (us's is the
    suite's own ``redis_cluster``)."""
    clusters: dict[str, RedisCluster] = {"us": redis_cluster}
    try:
        for name in REGIONS[1:]:
            clusters[name] = RedisCluster(primaries=3)
        yield clusters
    finally:
        for name, cluster in clusters.items():
            if name != "us":
                cluster.stop()


@pytest.fixture
def cluster_regions(region_clusters: dict[str, RedisCluster]) -> dict[str, Region]:
    """The three regions on a Redis Cluster each, emptied (every primary)."""
    for cluster in region_clusters.values():
        with cluster.client() as client:
            client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    return {name: Region(name, cluster) for name, cluster in region_clusters.items()}


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def any_regions(request: pytest.FixtureRequest) -> dict[str, Region]:
    """The three regions on a redis-server each behind its link (``regions``), then on a
    Redis Cluster each (``cluster_regions``): the same test on both."""
    found: dict[str, Region] = request.getfixturevalue(
        "regions" if request.param == "standalone" else "cluster_regions"
    )
    return found


@pytest.fixture
def memory_regions() -> dict[str, Region]:
    """The three regions in this process: each a MemoryRegionStore (``Region.memory_store``),
    no Redis and no links."""
    return {name: Region(name, None) for name in REGIONS}


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster), "memory"])
def any_regions_or_memory(request: pytest.FixtureRequest) -> dict[str, Region]:
    """``any_regions``, then the three regions in this process (``memory_regions``): the
    same test on servers, on Clusters and with no Redis at all."""
    names = {"standalone": "regions", "cluster": "cluster_regions", "memory": "memory_regions"}
    found: dict[str, Region] = request.getfixturevalue(names[request.param])
    return found


def set_latency(regions: dict[str, Region], one_way_s: float) -> None:
    """Every cross-region link waits ``one_way_s`` per chunk in each direction (a Cluster
    region has no proxy on its links: see the module)."""
    for region in regions.values():
        if region.link is not None:
            region.link.set_fault(Fault.LATENCY, one_way_s)
