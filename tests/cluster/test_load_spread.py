"""A many-key workload through RedisStore spreads its decisions over every Cluster primary.

Bound. A Cluster made by ``redis-cli --cluster create`` gives each of its 3
primaries a third of the 16,384 slots (5,461 or 5,462). CRC16 spreads distinct
keys over slots about uniformly, so each primary's share of n keys is close to
Binomial(n, 1/3): mean n/3 and standard deviation sqrt(n * 1/3 * 2/3). For
n = 3,000 that is 1,000 +- 25.8. The test allows 6 standard deviations
(+-155, +-15.5 %): a fair spread misses it with odds below one in a billion,
while a routing fault that sends a primary's keys elsewhere moves its count by
the whole 1,000. It is tighter than the +-25 % the issue suggests.
"""

from __future__ import annotations

import math
import random

import pytest
import redis

from ratewarden import Rate
from ratewarden.storage.redis import RedisStore
from tests._servers import RedisCluster
from tests.cluster._nodes import evalsha_calls, reset_stats

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

KEYS = 3_000
RATE = Rate.parse("100/minute")


def spread_bound(keys: int, primaries: int, sigmas: float = 6.0) -> float:
    """How far from ``keys / primaries`` a fair primary's count may be."""
    p = 1 / primaries
    return sigmas * math.sqrt(keys * p * (1 - p))


def workload(kind: str) -> list[str]:
    """3,000 distinct keys: numbered user ids, or random 128-bit API keys (seeded)."""
    if kind == "sequential":
        return [f"user:{n}" for n in range(KEYS)]
    rng = random.Random(5)
    return [f"api-key:{rng.getrandbits(128):032x}" for _ in range(KEYS)]


@pytest.mark.parametrize("kind", ["sequential", "random"])
def test_three_thousand_keys_give_every_primary_a_fair_third(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster, kind: str
) -> None:
    """Each primary runs 1,000 +- 155 of 3,000 decisions on distinct keys (INFO commandstats).

    Numbered ids split almost exactly (CRC16 is linear, so consecutive keys walk
    the slots evenly); random API keys spread like the binomial the bound assumes.
    """
    store = RedisStore(cluster_client, timeout=1.0)
    reset_stats(redis_cluster)
    allowed = sum(store.hit("gcra", key, RATE).allowed for key in workload(kind))
    counts = evalsha_calls(redis_cluster)
    store.close()
    bound = spread_bound(KEYS, 3)
    print(
        f"\nevalsha per primary for {KEYS} {kind} keys: {sorted(counts.values())} "
        f"(allowed +-{bound:.0f})"
    )
    assert allowed == KEYS
    assert len(counts) == 3
    assert sum(counts.values()) == KEYS
    for port, calls in counts.items():
        assert abs(calls - KEYS / 3) <= bound, f"primary {port} ran {calls} of {KEYS}: {counts}"


def test_one_key_stays_on_one_primary(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """The opposite case the hot-key work starts from: one key's decisions all go to one node."""
    store = RedisStore(cluster_client, timeout=1.0)
    reset_stats(redis_cluster)
    for _ in range(300):
        store.hit("gcra", "tenant:hot", Rate.parse("1000/second"))
    counts = evalsha_calls(redis_cluster)
    store.close()
    assert sorted(counts.values()) == [0, 0, 300]
