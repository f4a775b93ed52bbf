"""A cross-region link to a Redis Cluster: one fault proxy per node.

A Cluster client follows the slot table to every primary, so one proxy cannot stand in
for the link (``conftest``). Here each node gets its own ``FaultProxy``, and the client
is told, through redis-py's ``address_remap``, to reach each node through its proxy: the
startup node, every address ``CLUSTER SLOTS`` names and every ``MOVED``/``ASK``. A fault
set on the link is set on every proxy, so the whole Cluster is cut off (or slowed) for
the client at once, as a cross-region link would be.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests._servers import HOST, RedisCluster
from tests.faults._proxy import Fault, FaultProxy


class ClusterLink:
    """Every node of ``cluster`` behind a proxy of its own."""

    def __init__(self, cluster: RedisCluster) -> None:
        self.proxies = {node.port: FaultProxy(node.port) for node in cluster.nodes}
        self._first = cluster.nodes[0].port

    def remap(self, address: tuple[str, int]) -> tuple[str, int]:
        """A node's address as the Cluster gives it -> its proxy's (others unchanged)."""
        host, port = address
        proxy = self.proxies.get(port)
        return (HOST, proxy.port) if proxy is not None else (host, port)

    def _options(self, timeout: float) -> dict[str, Any]:
        return {
            "host": HOST,
            "port": self.proxies[self._first].port,
            "address_remap": self.remap,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
        }

    def client(self, timeout: float = 1.0) -> redis.RedisCluster:
        """A blocking Cluster client across the link, which fails a call at once (no retry)."""
        return redis.RedisCluster(retry=Retry(NoBackoff(), 0), **self._options(timeout))

    def aclient(self, timeout: float = 1.0) -> aredis.RedisCluster:
        """``client`` for asyncio."""
        return aredis.RedisCluster(**self._options(timeout))

    def set_fault(self, fault: Fault, latency: float = 0.0) -> None:
        """``FaultProxy.set_fault`` on every node's proxy."""
        for proxy in self.proxies.values():
            proxy.set_fault(fault, latency)

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
