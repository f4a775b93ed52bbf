"""Leases under a burst, and a lease too large for its rate.

300 concurrent tasks at 100/hour with ``k = 10``: one buys a lease, the others ask
the store for themselves. The store charges the lease and 90 of the others, and
denies the rest; a denied request now spends the units the buyer credited
meanwhile, so the burst itself admits 100 and strands nothing (it admitted 91,
with 9 units left in the balance until ``lease_ttl``).

A lease of more than half a rate's capacity lets one process's first request buy
most of the key's bucket: it is logged once per limiter and rates.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence

import pytest

from ratewarden import Decision, Rate
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier
from tests._servers import RedisCluster, RedisServer

RATE = Rate.parse("100/hour")
TOPOLOGIES = ["standalone", pytest.param("cluster", marks=pytest.mark.cluster)]


class RoundTrip(AsyncMemoryStore):
    """An AsyncMemoryStore whose hits yield to the event loop once before deciding, as a
    network round trip does: concurrent tasks all reach the store before any answer."""

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        await asyncio.sleep(0)
        return await super().hit(algorithm, key, rates, cost)


async def burst(tiers: AsyncTwoTier, key: str) -> tuple[int, int]:
    """300 concurrent hits on ``key``: how many were admitted, and the units still held."""
    decisions = await asyncio.gather(*(tiers.hit(key, RATE) for _ in range(300)))
    assert tiers.leases is not None
    return sum(d.allowed for d in decisions), tiers.leases.outstanding(tiers.clock.now_us())


def test_a_burst_admits_the_limit_when_every_hit_waits_for_its_answer() -> None:
    """Over a store that answers after a yield (memory, deterministic): 100 admitted by the
    burst itself, none held, none wasted; 9 paid from the lease after a store denial."""
    tiers = AsyncTwoTier(RoundTrip(clock=ManualClock()), lease=10)
    assert asyncio.run(burst(tiers, "key")) == (100, 0)
    assert tiers.leases is not None and tiers.leases.wasted == 0
    assert tiers.counts.leases_bought == 1 and tiers.counts.lease_hits == 9


@pytest.mark.redis
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_burst_of_tasks_admits_the_limit_on_redis(
    request: pytest.FixtureRequest, topology: str
) -> None:
    """300 tasks on one AsyncTwoTier over a real Redis (standalone, then a 3-primary
    Cluster): the burst admits exactly 100 and holds no unit, with no requests after it."""
    if topology == "standalone":
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        url = cluster.url

    async def main() -> tuple[int, int]:
        store = AsyncRedisStore.from_url(url, clock=ManualClock(), timeout=2.0)
        try:
            return await burst(AsyncTwoTier(store, lease=10), uuid.uuid4().hex)
        finally:
            await store.aclose()

    assert asyncio.run(main()) == (100, 0)


def lease_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lease=" in r.getMessage()]


def test_a_lease_over_half_a_rate_is_logged_once_per_rates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """lease=6 on 10/minute: one warning naming the lease, the rate and the sizing advice,
    however many keys and buys; the decisions are unchanged (the first request buys 6)."""
    tiers = TwoTier(MemoryStore(clock=ManualClock()), lease=6, name="bulk")
    rate = Rate.parse("10/minute")
    with caplog.at_level(logging.WARNING, logger="ratewarden.limiter"):
        first = tiers.hit("a", rate)
        for key in ("a", "b", "c"):
            for _ in range(6):
                tiers.hit(key, rate)
    assert first.allowed and first.remaining == 4 + 5  # the store's 4 and the 5 held
    [warning] = lease_warnings(caplog)
    assert "bulk" in warning and "lease=6" in warning and "10/minute" in warning
    assert "divided by the number of processes" in warning


@pytest.mark.parametrize(
    ("lease", "rates", "warned"),
    [
        (5, [Rate.parse("10/minute")], False),  # half: not warned
        (6, [Rate.parse("10/minute")], True),
        (10, [Rate.parse("10/minute")], True),
        (20, [Rate.parse("10/minute")], True),  # more than the whole limit
        (3, [Rate.parse("100/minute", burst=5)], True),  # the burst is what a key holds
        (3, [Rate.parse("5/second"), Rate.parse("1000/hour")], True),  # any layer
        (10, [Rate.parse("600/minute"), Rate.parse("20/second")], False),
    ],
)
def test_a_lease_is_compared_with_each_rates_capacity(
    caplog: pytest.LogCaptureFixture, lease: int, rates: list[Rate], warned: bool
) -> None:
    """Warned when 2k exceeds any layer's capacity (its burst, else its limit)."""
    tiers = TwoTier(MemoryStore(clock=ManualClock()), lease=lease)
    with caplog.at_level(logging.WARNING, logger="ratewarden.limiter"):
        tiers.hit("key", rates)
    assert bool(lease_warnings(caplog)) is warned
