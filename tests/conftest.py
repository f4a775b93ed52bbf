"""Shared fixtures: real redis-server processes on loopback, started by the tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests._servers import RedisCluster, RedisServer


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
