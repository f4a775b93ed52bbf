"""Shared fixtures: real redis-server and valkey-server processes on loopback, started by tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from tests._servers import (
    NO_VALKEY,
    VALKEY_CLI,
    VALKEY_SERVER,
    RedisCluster,
    RedisSentinel,
    RedisServer,
    SilentServer,
)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One standalone redis-server for the whole session."""
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on an emptied standalone server."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Redis Cluster for the whole session."""
    cluster = RedisCluster(primaries=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """A cluster client on emptied primaries."""
    client = redis_cluster.client()
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    yield client
    client.close()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """One standalone valkey-server for the whole session (fails, not skips, without one)."""
    if VALKEY_SERVER is None:
        pytest.fail(NO_VALKEY, pytrace=False)
    server = RedisServer(binary=VALKEY_SERVER)
    yield server
    server.stop()


@pytest.fixture
def valkey_client(valkey_server: RedisServer) -> Iterator[redis.Redis]:
    """A redis-py client on an emptied standalone Valkey server."""
    client = valkey_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[RedisCluster]:
    """A 3-primary Valkey Cluster for the whole session (fails, not skips, without Valkey)."""
    if VALKEY_SERVER is None:
        pytest.fail(NO_VALKEY, pytrace=False)
    cluster = RedisCluster(primaries=3, binary=VALKEY_SERVER, cli=VALKEY_CLI)
    yield cluster
    cluster.stop()


@pytest.fixture
def valkey_cluster_client(valkey_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """A redis-py cluster client on emptied Valkey primaries."""
    client = valkey_cluster.client()
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    yield client
    client.close()


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
