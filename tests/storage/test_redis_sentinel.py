"""Sentinel: the store asks the Sentinels for the primary, and follows it through a failover."""

from __future__ import annotations

import time

import pytest
import redis

from ratewarden import Rate
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, RedisSentinel

pytestmark = pytest.mark.redis

RATE = Rate.parse("100/minute", burst=20)
STATE_KEY = b"rw:{%s}:gcra:100:60000000:20"


def test_sentinel_url_finds_the_primary_and_decides(redis_sentinel: RedisSentinel) -> None:
    """redis+sentinel://s1,s2/service: decisions land on the primary the Sentinels name."""
    store = RedisStore.from_url(redis_sentinel.url, clock=ManualClock(), timeout=0.5)
    assert "Sentinel service 'rw-primary'" in repr(store)
    assert store.hit("gcra", "sentinel-sync", RATE).remaining == 19
    assert store.hit("gcra", "sentinel-sync", RATE).remaining == 18
    store.close()
    with redis_sentinel.primary.client() as primary:
        assert primary.exists(STATE_KEY % b"sentinel-sync")


async def test_async_sentinel_url_finds_the_primary_and_decides(
    redis_sentinel: RedisSentinel,
) -> None:
    """The asyncio store resolves the primary through the Sentinels as well."""
    store = AsyncRedisStore.from_url(redis_sentinel.url, clock=ManualClock(), timeout=0.5)
    assert (await store.hit("gcra", "sentinel-async", RATE)).remaining == 19
    await store.aclose()
    with redis_sentinel.primary.client() as primary:
        assert primary.exists(STATE_KEY % b"sentinel-async")


def wait_for(condition: object, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_decisions_follow_the_primary_through_a_failover() -> None:
    """After SENTINEL FAILOVER the old primary refuses writes (READONLY); the store reconnects
    through the Sentinels and decides on the new primary, with no error for the caller."""
    setup = RedisSentinel(sentinels=1)
    try:
        store = RedisStore.from_url(setup.url, clock=ManualClock(), timeout=0.5)
        assert store.hit("gcra", "failover", RATE).remaining == 19
        assert setup.replica is not None
        old, new = setup.primary, setup.replica
        with setup.sentinels[0].client() as sentinel:

            def replica_known() -> bool:
                replicas = sentinel.sentinel_slaves(setup.service)
                return any(r["port"] == new.port and r["is_slave"] for r in replicas)

            wait_for(replica_known, "the Sentinel to discover the replica")

            def failover_started() -> bool:
                # Until the Sentinel has INFO from the replica itself (it asks every 10 s
                # once it learns of it), it has no replica it trusts: NOGOODSLAVE. Ask again.
                try:
                    sentinel.execute_command("SENTINEL", "FAILOVER", setup.service)
                except redis.ResponseError as error:
                    if "NOGOODSLAVE" not in str(error):
                        raise
                    return False
                return True

            wait_for(failover_started, "the Sentinel to trust the replica", seconds=30.0)

            def switched() -> bool:
                # SENTINEL MASTERS (what clients ask) changes when the failover ends.
                return bool(sentinel.sentinel_masters()[setup.service]["port"] == new.port)

            wait_for(switched, "the Sentinel to name the new primary")
        with old.client() as demoted:
            # Sentinel demotes the old primary on its next 10 s check; do it now instead.
            demoted.replicaof(HOST, new.port)
        # The store's connection still points at the old primary, now a replica.
        assert store.hit("gcra", "failover", RATE).allowed
        with new.client() as primary:
            assert primary.exists(STATE_KEY % b"failover")
        store.close()
    finally:
        setup.stop()
