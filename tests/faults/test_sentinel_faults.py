"""Sentinel failover under load: the primary is killed and the Sentinel promotes its replica.

A ``RedisStore`` on a ``redis+sentinel://`` URL (and an ``AsyncRedisStore``, 8 hits
in flight) keeps hitting one key while the primary gets SIGKILL. Until the
Sentinel has promoted the replica (down after 1 s here), calls fail fast with
StorageUnavailableError; then the store finds
the new primary through the Sentinel by itself and decides again. Replication
is asynchronous, so the test counts the hits the replica never received.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from ratewarden import Rate
from ratewarden.decision import Decision
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisSentinel
from tests.faults._load import REPORT, TIMEOUT, Phase

RATE = Rate.parse("1000000/y")
PROMOTION_LIMIT_S = 30.0
#: Hits the asyncio store has in flight at once.
IN_FLIGHT = 8


def phase(test: str, name: str) -> Phase:
    found = Phase(test, name)
    REPORT.append(found)
    return found


def hit(store: RedisStore, into: Phase) -> Decision | None:
    started = time.monotonic()
    try:
        outcome: Decision | BaseException = store.hit("gcra", "sentinel-load", RATE)
    except Exception as exc:  # recorded; anything unexpected fails the test
        outcome = exc
    into.record(started, outcome)
    return outcome if isinstance(outcome, Decision) else None


def wait_until_the_sentinel_trusts_the_replica(setup: RedisSentinel, limit: float = 30.0) -> None:
    """The Sentinel promotes only a replica it has had INFO from (it asks every 10 s after
    discovering one); until then a failover would find no good replica."""
    assert setup.replica is not None
    deadline = time.monotonic() + limit
    with setup.sentinels[0].client() as sentinel:
        while True:
            replicas = sentinel.sentinel_slaves(setup.service)
            ready = [
                r
                for r in replicas
                if r["port"] == setup.replica.port
                and r.get("master-link-status", r.get("master_link_status")) == "ok"
                and int(r.get("info-refresh", r.get("info_refresh", 10**9))) < 10_000
            ]
            if ready:
                return
            assert time.monotonic() < deadline, (
                f"the Sentinel never trusted the replica: {replicas}"
            )
            time.sleep(0.2)


@pytest.mark.timeout(120)
def test_the_store_follows_a_sentinel_failover_after_the_primary_dies() -> None:
    """Kill -9 the primary: fast failures until promotion, then decisions on the new primary."""
    test = "Sentinel primary kill -9"
    setup = RedisSentinel(sentinels=1)
    store = RedisStore.from_url(setup.url, clock=ManualClock(), timeout=TIMEOUT)
    try:
        wait_until_the_sentinel_trusts_the_replica(setup)
        before = phase(test, "before")
        hit(store, before)
        with setup.primary.client() as primary:
            # A freshly synced replica gets no writes until its first acknowledgement (up
            # to 1 s); a kill inside that second loses all (seen: 30 of 30). WAIT for it.
            assert primary.execute_command("WAIT", 1, 5000) == 1
        for _ in range(29):
            hit(store, before)
        assert before.decided == 30
        setup.primary.process.kill()
        setup.primary.process.wait(5)
        killed = time.monotonic()
        down = phase(test, "down")
        last = None
        while last is None:
            assert time.monotonic() - killed < PROMOTION_LIMIT_S, "no failover happened"
            last = hit(store, down)
            time.sleep(0.01)
        promoted_after = time.monotonic() - killed
        after = phase(test, "after")
        for _ in range(30):
            last = hit(store, after) or last
    finally:
        store.close()
        setup.stop()
    applied = before.allowed + down.allowed + after.allowed
    lost = applied - (RATE.capacity - last.remaining)
    print(
        f"\n{test}: decided again {promoted_after:.2f} s after the kill; "
        f"{down.unavailable} fast failures meanwhile (slowest {down.worst_s * 1000:.1f} ms); "
        f"hits lost by async replication: {lost} of {applied}"
    )
    assert down.unavailable == down.calls - 1, "a decision was made with no primary"
    assert after.decided == 30
    assert 0 <= lost <= before.allowed


async def ahit_round(store: AsyncRedisStore, into: Phase) -> list[Decision]:
    """``IN_FLIGHT`` hits at once, each timed and recorded; the decisions they got."""

    async def one() -> Decision | None:
        started = time.monotonic()
        try:
            outcome: Decision | BaseException = await store.hit("gcra", "sentinel-load", RATE)
        except Exception as exc:  # recorded; anything unexpected fails the test
            outcome = exc
        into.record(started, outcome)
        return outcome if isinstance(outcome, Decision) else None

    outcomes = await asyncio.gather(*(one() for _ in range(IN_FLIGHT)))
    return [outcome for outcome in outcomes if outcome is not None]


@pytest.mark.timeout(120)
async def test_the_async_store_follows_a_sentinel_failover_after_the_primary_dies() -> None:
    """The same failover under AsyncRedisStore alone (8 hits in flight): fast failures until
    the promotion, then decisions on the new primary, found through the Sentinel."""
    test = "Sentinel primary kill -9 (async)"
    setup = RedisSentinel(sentinels=1)
    store = AsyncRedisStore.from_url(setup.url, clock=ManualClock(), timeout=TIMEOUT)
    try:
        wait_until_the_sentinel_trusts_the_replica(setup)
        before = phase(test, "before")
        await ahit_round(store, before)
        with setup.primary.client() as primary:
            assert primary.execute_command("WAIT", 1, 5000) == 1  # see the blocking twin
        for _ in range(3):
            await ahit_round(store, before)
        assert before.decided == 4 * IN_FLIGHT
        setup.primary.process.kill()
        setup.primary.process.wait(5)
        killed = time.monotonic()
        down = phase(test, "down")
        decided: list[Decision] = []
        while not decided:
            assert time.monotonic() - killed < PROMOTION_LIMIT_S, "no failover happened"
            decided = await ahit_round(store, down)
            await asyncio.sleep(0.01)
        promoted_after = time.monotonic() - killed
        after = phase(test, "after")
        for _ in range(4):
            decided += await ahit_round(store, after)
    finally:
        await store.aclose()
        setup.stop()
    applied = before.allowed + down.allowed + after.allowed
    lost = applied - (RATE.capacity - min(decision.remaining for decision in decided))
    print(
        f"\n{test}: decided again {promoted_after:.2f} s after the kill; "
        f"{down.unavailable} fast failures meanwhile (slowest {down.worst_s * 1000:.1f} ms); "
        f"hits lost by async replication: {lost} of {applied}"
    )
    # Only the round that saw the new primary decided: none was made with no primary.
    assert down.unavailable >= down.calls - IN_FLIGHT, "a decision was made with no primary"
    assert after.decided == 4 * IN_FLIGHT
    assert 0 <= lost <= before.allowed
