"""The Redis idempotency store on a Cluster with one primary down: ``complete`` still stores a
response on a healthy primary that has not cached its script yet.

redis-py's ``Script`` loads a missing script with ``SCRIPT LOAD``, which a Cluster client
sends to every primary; with one of them down, every ``complete`` on a healthy primary that
lacked the script (new, restarted, failed over, flushed) failed, and the request's retry ran
again. The store now sends the script by its SHA1 and, on NOSCRIPT, with its source, to the
key's own primary.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.crc import key_slot

from ratewarden.idempotency import StoredResponse
from ratewarden.storage.idempotency import AsyncRedisIdempotencyStore, RedisIdempotencyStore
from tests._servers import RedisCluster

pytestmark = pytest.mark.cluster

PREFIX = "ratewarden:idem:"
RESPONSE = StoredResponse(201, ((b"content-type", b"application/json"),), b'{"id": 7}')


def _keys_on(admin: redis.RedisCluster, nodes: list[Any], each: int) -> dict[str, list[str]]:
    """``each`` idempotency keys whose records live on each of ``nodes``."""
    found: dict[str, list[str]] = {node.name: [] for node in nodes}
    for i in range(400):
        key = f"order-{i}"
        home = admin.nodes_manager.get_node_from_slot(key_slot((PREFIX + key).encode())).name
        if home in found and len(found[home]) < each:
            found[home].append(key)
    assert all(len(keys) == each for keys in found.values())
    return found


async def test_complete_runs_on_a_healthy_primary_that_lacks_its_script(
    own_cluster: RedisCluster,
) -> None:
    admin = own_cluster.client()
    client = redis.RedisCluster(host="127.0.0.1", port=own_cluster.nodes[0].port, socket_timeout=1)
    aclient = aredis.RedisCluster(
        host="127.0.0.1", port=own_cluster.nodes[0].port, socket_timeout=1
    )
    try:
        primaries = admin.get_primaries()
        victim = next(n for n in primaries if n.port != own_cluster.nodes[0].port)
        healthy = [n for n in primaries if n.name != victim.name]
        keys = _keys_on(admin, healthy, 2)
        store, astore = RedisIdempotencyStore(client), AsyncRedisIdempotencyStore(aclient)
        for number, key in enumerate(k for found in keys.values() for k in found):
            # Each twin's slot table read while every primary is up.
            assert store.begin(key, "fp", f"t{number}", 60.0).state == "acquired"
        await aclient.initialize()
        next(n for n in own_cluster.nodes if n.port == victim.port).stop()
        for node in healthy:
            admin.execute_command("SCRIPT", "FLUSH", target_nodes=node)
        for number, key in enumerate(found[0] for found in keys.values()):
            assert store.complete(key, f"t{number * 2}", RESPONSE, 3600.0)
        for node in healthy:
            admin.execute_command("SCRIPT", "FLUSH", target_nodes=node)
        for number, key in enumerate(found[1] for found in keys.values()):
            assert await astore.complete(key, f"t{number * 2 + 1}", RESPONSE, 3600.0)
        for key in (k for found in keys.values() for k in found):
            claim = store.begin(key, "fp", "later", 60.0)
            assert claim.state == "done" and claim.response == RESPONSE
    finally:
        client.close()
        await aclient.aclose()
        admin.close()
