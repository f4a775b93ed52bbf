"""Three regions on loopback: three real redis-servers, each reachable from the others
only through a latency-injecting TCP proxy (tests/faults/_proxy.py), the cross-region link.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests._servers import HOST, RedisServer
from tests.faults._proxy import Fault, FaultProxy

REGIONS = ("us", "eu", "ap")


@dataclass
class Region:
    """One region: its Redis, and the proxy other regions reach it through."""

    name: str
    server: RedisServer
    link: FaultProxy

    def local(self) -> redis.Redis:
        """A client in the region itself (no proxy)."""
        return self.server.client()

    def remote(self, timeout: float = 1.0, *, retries: int | None = None) -> redis.Redis:
        """A client in another region: every byte crosses the latency proxy. ``retries``:
        how often a failed call is tried again, at once (default: redis-py's policy)."""
        options: dict[str, Any] = {}
        if retries is not None:
            options["retry"] = Retry(NoBackoff(), retries)
        return redis.Redis(
            host=HOST,
            port=self.link.port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            **options,
        )

    def alocal(self) -> aredis.Redis:
        """``local`` for asyncio: a redis.asyncio client in the region itself."""
        return aredis.Redis(host=HOST, port=self.server.port)

    def aremote(self, timeout: float = 1.0, *, retries: int | None = None) -> aredis.Redis:
        """``remote`` for asyncio: a redis.asyncio client across the latency proxy."""
        options: dict[str, Any] = {}
        if retries is not None:
            options["retry"] = AsyncRetry(NoBackoff(), retries)
        return aredis.Redis(
            host=HOST,
            port=self.link.port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            **options,
        )


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


def set_latency(regions: dict[str, Region], one_way_s: float) -> None:
    """Every cross-region link waits ``one_way_s`` per chunk in each direction."""
    for region in regions.values():
        region.link.set_fault(Fault.LATENCY, one_way_s)
