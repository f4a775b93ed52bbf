"""A breaker kept per Cluster primary: one primary's outage opens that primary's circuit only.

A 3-primary Redis Cluster with no replicas, and one primary killed: its slots
have no server until an operator brings one back. Its keys fail, and after the
breaker's consecutive failures they are answered by the failure mode without a
store call. With ``CircuitBreaker(per_node=True)`` (the two-tier limiters' own
breaker, and ``ratewarden serve``'s) keys on the other two primaries are still
decided by Redis all along; with one circuit for the store they were not, which
the first test shows side by side. Time is a ``ManualClock`` (the store's and
the breaker's); the kill is a real ``kill -9`` of a real redis-server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden import AsyncLimiter, AsyncTwoTier, CircuitBreaker, Limiter, Rate
from ratewarden.errors import CircuitOpenError, ConfigurationError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, RedisCluster, RedisServer
from tests.faults._load import TIMEOUT
from tests.faults.test_cluster_faults import node_of
from tests.faults.test_serve_failover import DOMAIN, RULES, Target, targets_on
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, request

pytestmark = [pytest.mark.faults, pytest.mark.redis]

#: Far from any limit: every answer the store gives is an allow, every failure mode's a deny.
RATE = Rate.parse("1000/h")


def keys_by_primary(cluster: RedisCluster) -> tuple[str, list[str], RedisServer]:
    """A key on one primary (the victim's), one key on each other primary, the victim."""
    victim = node_of(cluster, "victim")
    survivors: dict[int, str] = {}
    for n in range(1000):
        key = f"tenant-{n}"
        server = node_of(cluster, key)
        if server is not victim:
            survivors.setdefault(server.port, key)
        if len(survivors) == 2:
            break
    return "victim", list(survivors.values()), victim


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    found = RedisCluster(primaries=3)
    yield found
    found.stop()


def kill(server: RedisServer) -> None:
    server.process.kill()
    server.process.wait(5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("per_node", [True, False], ids=["per-node", "one-circuit"])
def test_a_dead_primary_opens_its_own_circuit_and_the_others_keep_deciding(
    cluster: RedisCluster, per_node: bool
) -> None:
    """Three failures on the dead primary open its circuit: its keys are then denied
    (``closed``) with no store call. Per node, the other primaries' keys are still decided
    by Redis; with one circuit they are denied too, without a store call."""
    victim_key, survivors, victim = keys_by_primary(cluster)
    clock = ManualClock()
    store = RedisStore.from_url(cluster.url, clock=clock, timeout=TIMEOUT)
    breaker = CircuitBreaker(
        failures=3, failure_ratio=None, cooldown=1.0, clock=clock, per_node=per_node
    )
    limiter = Limiter(store, breaker=breaker, failure_mode="closed")
    try:
        for key in (victim_key, *survivors):
            assert limiter.hit(key, RATE).degraded == ""
        kill(victim)
        for _ in range(3):
            assert limiter.hit(victim_key, RATE).degraded == "closed"
        sent = limiter.counts.store_calls
        assert not limiter.hit(victim_key, RATE).allowed
        assert limiter.counts.store_calls == sent, "an open circuit sent the call"

        answers = [limiter.hit(key, RATE) for key in survivors for _ in range(5)]
        if per_node:
            assert [d.degraded for d in answers] == [""] * 10
            assert [d.remaining for d in answers[:5]] == [998, 997, 996, 995, 994]
            assert limiter.counts.store_calls == sent + 10
            assert breaker.states() == {
                "": "closed",
                f"{HOST}:{victim.port}": "open",
                **{store.node_of(key): "closed" for key in survivors},
            }
        else:
            assert [d.degraded for d in answers] == ["closed"] * 10
            assert limiter.counts.store_calls == sent
            assert breaker.states() == {"": "open"}

        clock.advance(1.0)  # the cool-down: the victim's probe goes, fails, and re-opens
        assert limiter.hit(victim_key, RATE).degraded == "closed"
        assert limiter.counts.store_calls == sent + (11 if per_node else 1)
    finally:
        store.close()


@pytest.mark.timeout(60)
async def test_an_async_two_tier_limiter_keeps_a_circuit_per_primary_by_default(
    cluster: RedisCluster,
) -> None:
    """``AsyncTwoTier``'s own breaker is per node: after the dead primary's five failures
    open its circuit, keys on the live primaries are still decided by Redis."""
    victim_key, survivors, victim = keys_by_primary(cluster)
    clock = ManualClock()
    store = AsyncRedisStore.from_url(cluster.url, clock=clock, timeout=TIMEOUT)
    limiter = AsyncTwoTier(store, failure_mode="closed")
    try:
        for key in (victim_key, *survivors):
            assert (await limiter.hit(key, RATE)).degraded == ""
        # With the slot table loaded: refused as the store refuses it, not a UnicodeEncodeError.
        with pytest.raises(ConfigurationError, match="surrogate"):
            await limiter.hit("tenant-\ud800", RATE)
        kill(victim)
        for _ in range(5):
            assert (await limiter.hit(victim_key, RATE)).degraded == "closed"
        assert limiter.breaker is not None
        assert limiter.breaker.states()[f"{HOST}:{victim.port}"] == "open"
        sent = limiter.counts.store_calls
        answers = [await limiter.hit(key, RATE) for key in survivors for _ in range(5)]
        assert [d.degraded for d in answers] == [""] * 10
        assert limiter.counts.store_calls == sent + 10
    finally:
        await store.aclose()


@pytest.mark.timeout(60)
async def test_concurrency_slots_and_batches_go_through_their_nodes_circuit(
    cluster: RedisCluster,
) -> None:
    """A concurrency slot's key and a ``hit_all`` batch are routed to their node's circuit
    too: the dead primary's circuit refuses them, a live primary's lets them through."""
    victim_key, survivors, victim = keys_by_primary(cluster)
    clock = ManualClock()
    store = AsyncRedisStore.from_url(cluster.url, clock=clock, timeout=TIMEOUT)
    breaker = CircuitBreaker(failures=2, failure_ratio=None, clock=clock, per_node=True)
    limiter = AsyncLimiter(store, breaker=breaker)
    try:
        assert (await limiter.hit_all([(survivors[0], RATE, 1)])) is not None
        kill(victim)
        for _ in range(2):
            with pytest.raises(StorageUnavailableError):
                await limiter.acquire_slot(victim_key, 5)
        with pytest.raises(CircuitOpenError, match=f"circuit breaker of {HOST}:{victim.port} open"):
            await limiter.hit_all([(victim_key, RATE, 1)])
        # Keys on several primaries: declined (None, nothing sent), as the store declines them,
        # whatever the state of the first key's circuit; the caller then decides them apart.
        assert await limiter.hit_all([(victim_key, RATE, 1), (survivors[0], RATE, 1)]) is None
        lease = await limiter.acquire_slot(survivors[0], 5)
        assert lease.allowed
        decided = await limiter.hit_all([(survivors[1], RATE, 1)])
        assert decided is not None and decided[0].remaining == 999
    finally:
        await store.aclose()


@pytest.mark.timeout(60)
async def test_serve_opens_the_dead_primarys_circuit_only(
    cluster: RedisCluster, start_server: StartServer
) -> None:
    """``ratewarden serve`` on a ``redis+cluster://`` URL: five calls in a row for a counter
    on the dead primary open its circuit (a ``closed`` rule then answers OVER_LIMIT at once);
    counters on the live primaries are still decided by Redis (OK at 1000/hour), alone or in
    one request with the dead primary's."""
    targets, victim = targets_on(cluster)
    dead = next(t for t in targets if t.side == "victim" and t.mode == "closed")
    live = [t for t in targets if t.side == "survivor" and t.mode == "closed"]
    server = await start_server(RULES, store_url=cluster.url, breaker_cooldown=30.0)
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)

        async def code(target: Target) -> int:
            reply = await stub.ShouldRateLimit(request(DOMAIN, {target.mode: target.value}))
            return int(reply.overall_code)

        assert await code(dead) == OK
        kill(victim)
        assert [await code(dead) for _ in range(6)] == [OVER_LIMIT] * 6
        breaker = server.service.breaker
        assert breaker is not None
        assert breaker.states()[f"{HOST}:{victim.port}"] == "open"
        assert [await code(target) for target in live for _ in range(3)] == [OK] * 3 * len(live)
        # One request for both primaries: the dead one's rule answers by its failure mode, the
        # live one's is still Redis's (its circuit closed), not the dead circuit's refusal.
        both = request(DOMAIN, {dead.mode: dead.value}, {live[0].mode: live[0].value})
        reply = await stub.ShouldRateLimit(both)
        assert [status.code for status in reply.statuses] == [OVER_LIMIT, OK]
