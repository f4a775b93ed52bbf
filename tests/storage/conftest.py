"""Fixtures for the store tests: the same test on a standalone server and a Cluster, of each of
Redis and Valkey (redis-py clients both: Valkey speaks the same protocol)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis
import redis.asyncio as aredis

from tests._servers import RedisCluster, RedisServer, free_port, self_signed_certificate

Client = redis.Redis | redis.RedisCluster
AsyncClient = aredis.Redis | aredis.RedisCluster

TOPOLOGIES = [
    "standalone",
    pytest.param("cluster", marks=pytest.mark.cluster),
    "valkey",
    pytest.param("valkey-cluster", marks=pytest.mark.cluster),
]
# topology: (session fixture with the server or Cluster, fixture with an emptied blocking client)
FIXTURES = {
    "standalone": ("redis_server", "redis_client"),
    "cluster": ("redis_cluster", "cluster_client"),
    "valkey": ("valkey_server", "valkey_client"),
    "valkey-cluster": ("valkey_cluster", "valkey_cluster_client"),
}


@pytest.fixture(params=TOPOLOGIES)
def client(request: pytest.FixtureRequest) -> Client:
    """An emptied blocking client: standalone, then 3-primary Cluster; Redis, then Valkey."""
    found: Client = request.getfixturevalue(FIXTURES[request.param][1])
    return found


@pytest.fixture(params=TOPOLOGIES)
async def async_client(request: pytest.FixtureRequest) -> AsyncIterator[AsyncClient]:
    """An emptied asyncio client: standalone, then 3-primary Cluster; Redis, then Valkey."""
    setup: RedisServer | RedisCluster = request.getfixturevalue(FIXTURES[request.param][0])
    made: AsyncClient
    if isinstance(setup, RedisServer):
        made = aredis.Redis(host="127.0.0.1", port=setup.port)
        await made.flushall()
    else:
        made = aredis.RedisCluster(host="127.0.0.1", port=setup.nodes[0].port)
        await made.flushall(target_nodes=aredis.RedisCluster.PRIMARIES)
    yield made
    await made.aclose()


def all_keys(client: Client) -> list[bytes]:
    """Every key on the server, or on every Cluster primary."""
    if isinstance(client, redis.RedisCluster):
        return list(client.keys(target_nodes=redis.RedisCluster.PRIMARIES))
    return list(client.keys())


def flush_scripts(client: Client) -> None:
    """Empty the script cache everywhere, as a restart or failover would."""
    if isinstance(client, redis.RedisCluster):
        for node in client.get_primaries():
            client.execute_command("SCRIPT", "FLUSH", target_nodes=node)
    else:
        client.script_flush()


@pytest.fixture
def tls_redis(
    make_redis: Callable[..., RedisServer], tmp_path: Path
) -> tuple[RedisServer, int, Path]:
    """A server that also speaks TLS: (server, TLS port, CA certificate to trust)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = self_signed_certificate(tmp_path)
    tls_port = free_port()
    server = make_redis(
        [
            f"tls-port {tls_port}",
            f"tls-cert-file {cert}",
            f"tls-key-file {key}",
            f"tls-ca-cert-file {cert}",
            "tls-auth-clients no",
        ]
    )
    return server, tls_port, cert
