"""Per-second limits on a Redis of their own (envoyproxy/ratelimit's REDIS_PERSECOND).

Two real redis-servers: the service started with ``--store`` on one and
``--store-per-second`` on the other keeps each counter where upstream would, and decides
a request spanning both as it decides any other (checked, then charged: a denied request
consumes nothing in either).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratewarden.rate import Rate
from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.split import AsyncSplitStore, per_second
from tests._servers import RedisServer
from tests.server_transport.conftest import OK, OVER_LIMIT, request

#: burst is a GCRA (a fixed window's 30 s end among the calls refilled it, shown; the unit
#: must stay seconds under a minute to be per second), steady counts per hour (a minute's end
#: would leave a second key in the main Redis).
RULES = """\
domain: split
descriptors:
  - key: burst
    rate_limit: {algorithm: gcra, unit: second, unit_multiplier: 30, requests_per_unit: 2}
  - key: steady
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: ten_seconds
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5}
"""


def test_per_second_means_whole_seconds_under_a_minute() -> None:
    """unit second with a multiplier below 60 is per second; a minute (or 60 seconds, which
    is the same rate) is not, nor is a call mixing both."""
    assert per_second(Rate(2, 1))
    assert per_second([Rate(5, 10), Rate(1, 1)])
    assert not per_second(Rate(100, 60))
    assert not per_second([Rate(2, 1.0), Rate(100, 60)])
    assert not per_second(Rate(1, 0.5))
    assert not per_second(Rate(1, 60))


def test_a_step_over_both_stores_is_not_one_step() -> None:
    """hit_all on keys of one store is that store's atomic step; spread over both, None."""

    async def scenario() -> None:
        main, fast = AsyncMemoryStore(), AsyncMemoryStore()
        split = AsyncSplitStore(main, fast)
        second, minute = Rate(2, 1), Rate(100, 60)
        both = [("a", (second,), 1), ("b", (minute,), 1)]
        assert await split.hit_all("gcra", both) is None
        found = await split.hit_all("gcra", [("a", (second,), 1), ("c", (second,), 1)])
        assert found is not None and [d.remaining for d in found] == [1, 1]
        assert (await fast.hit("gcra", "a", second, 0)).remaining == 1
        assert (await main.hit("gcra", "a", second, 0)).remaining == 2  # untouched
        assert await split.ping()

    asyncio.run(scenario())


@pytest.fixture
def second_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.redis
def test_each_counter_lives_in_the_redis_upstream_would_use(
    tmp_path: Path, redis_server: RedisServer, second_redis: RedisServer
) -> None:
    """burst (GCRA, 2 per 30 seconds: a token back every 15 s, so none between calls that
    take less, with no window's end to cross) and ten_seconds count in the per-second Redis,
    steady (per hour) in the main one; the third call of a request on burst and steady is
    denied and charges neither."""
    (tmp_path / "split.yaml").write_text(RULES)
    main, fast = redis_server.client(), second_redis.client()
    main.flushall()
    fast.flushall()
    settings = Settings(
        config_paths=(str(tmp_path),),
        grpc_port=0,
        http_port=0,
        reload_interval=0,
        store_url=redis_server.url,
        store_per_second=second_redis.url,
        store_timeout=1.0,
    )

    async def scenario() -> list[int]:
        server = RateLimitServer(settings)
        try:
            codes = []
            for _ in range(3):
                answer = await server.should_rate_limit(
                    request("split", {"burst": "u1"}, {"steady": "u1"})
                )
                codes.append(answer.overall_code)
            answer = await server.should_rate_limit(request("split", {"ten_seconds": "u1"}))
            codes.append(answer.overall_code)
            steady = await server.should_rate_limit(request("split", {"steady": "u1"}))
            assert steady.statuses[0].limit_remaining == 97  # two charged, not the denied one
            return codes
        finally:
            await server.store.aclose()

    try:
        assert asyncio.run(scenario()) == [OK, OK, OVER_LIMIT, OK]
        fast_keys = [key.decode() for key in fast.keys("*")]
        main_keys = [key.decode() for key in main.keys("*")]
        assert sorted("burst" in k or "ten_seconds" in k for k in fast_keys) == [True, True]
        assert len(main_keys) == 1 and "steady" in main_keys[0]
    finally:
        main.close()
        fast.close()
