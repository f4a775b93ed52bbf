"""Shared fixtures: real redis-server, valkey-server and memcached processes on loopback,
started by tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import settings

from tests._memcached import MemcachedServer
from tests._servers import (
    HOST,
    NO_VALKEY,
    VALKEY_CLI,
    VALKEY_SERVER,
    RedisCluster,
    RedisSentinel,
    RedisServer,
    SilentServer,
)

# No per-example deadline: speed is measured in benchmarks, never asserted by a test, and on a
# loaded 2-core machine (CI runs Redis, Envoy and the suite on it) a deadline fails at random.
settings.register_profile("ratewarden", deadline=None)
settings.load_profile("ratewarden")


def _running(server: RedisServer) -> Iterator[RedisServer]:
    """``server`` until the end of the session, then stopped."""
    yield server
    server.stop()


def _running_cluster(cluster: RedisCluster) -> Iterator[RedisCluster]:
    """``cluster`` until the end of the session, then stopped."""
    yield cluster
    cluster.stop()


def _emptied(client: redis.Redis) -> Iterator[redis.Redis]:
    """``client`` on an emptied server, closed after the test."""
    client.flushall()
    yield client
    client.close()


def _emptied_cluster(client: redis.RedisCluster) -> Iterator[redis.RedisCluster]:
    """``client`` on emptied primaries, closed after the test."""
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    yield client
    client.close()


def _valkey() -> str:
    """The valkey-server binary; without one the test fails (it is not skipped)."""
    if VALKEY_SERVER is None:
        pytest.fail(NO_VALKEY, pytrace=False)
    return VALKEY_SERVER


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One standalone redis-server for the whole session."""
    yield from _running(RedisServer())


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on an emptied standalone server."""
    yield from _emptied(redis_server.client())


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Redis Cluster for the whole session."""
    yield from _running_cluster(RedisCluster(primaries=3))


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Redis Cluster of the test's own, for a test that stops one of its nodes;
    stopped after the test."""
    yield from _running_cluster(RedisCluster(primaries=3))


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """A cluster client on emptied primaries."""
    yield from _emptied_cluster(redis_cluster.client())


@pytest.fixture
async def async_client(redis_cluster: RedisCluster) -> AsyncIterator[aredis.RedisCluster]:
    """An asyncio cluster client on emptied primaries."""
    client = aredis.RedisCluster(host=HOST, port=redis_cluster.nodes[0].port)
    await client.initialize()
    await client.flushall(target_nodes=aredis.RedisCluster.PRIMARIES)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """One standalone valkey-server for the whole session (fails, not skips, without one)."""
    yield from _running(RedisServer(binary=_valkey()))


@pytest.fixture
def valkey_client(valkey_server: RedisServer) -> Iterator[redis.Redis]:
    """A redis-py client on an emptied standalone Valkey server."""
    yield from _emptied(valkey_server.client())


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Valkey Cluster for the whole session (fails, not skips, without Valkey)."""
    yield from _running_cluster(RedisCluster(primaries=3, binary=_valkey(), cli=VALKEY_CLI))


@pytest.fixture
def valkey_cluster_client(valkey_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """A redis-py cluster client on emptied Valkey primaries."""
    yield from _emptied_cluster(valkey_cluster.client())


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    """A primary, a replica and two Sentinels naming it, for the whole session."""
    setup = RedisSentinel(sentinels=2)
    yield setup
    setup.stop()


@pytest.fixture
def make_redis() -> Iterator[Callable[..., RedisServer]]:
    """Start dedicated redis-servers (``make_redis(["requirepass x"])``) stopped after the test.

    For tests that pause, stop or reconfigure a server.
    """
    servers: list[RedisServer] = []

    def start(extra: list[str] | None = None, port: int | None = None) -> RedisServer:
        servers.append(RedisServer(extra, port=port))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    """A port that accepts connections and never answers."""
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def memcached_server() -> Iterator[MemcachedServer]:
    """One memcached for the whole session; ``memcached`` flushes it for a test."""
    server = MemcachedServer()
    yield server
    server.stop()


@pytest.fixture
def memcached(memcached_server: MemcachedServer) -> MemcachedServer:
    """The session's memcached, emptied."""
    memcached_server.flush()
    return memcached_server


@pytest.fixture
def make_memcached() -> Iterator[Callable[..., MemcachedServer]]:
    """Start dedicated memcached servers (``make_memcached(memory_mb=2)``), stopped after the
    test: for tests that kill a server or fill its memory."""
    servers: list[MemcachedServer] = []

    def start(port: int | None = None, memory_mb: int = 64, **options: Any) -> MemcachedServer:
        servers.append(MemcachedServer(port, memory_mb, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
