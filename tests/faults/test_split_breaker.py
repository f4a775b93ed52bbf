"""A breaker kept per node behind a per-second store: one store's outage opens its circuit only.

``ratewarden serve --store-per-second`` keeps the counters of per-second limits on a
Redis of their own (``AsyncSplitStore``). Its breaker is kept per node, and the split
store names the per-second store's node ``per-second``, so a dead per-second Redis
opens that circuit only: the main Redis's counters are still decided, and the other
way round. Two real redis-servers, one killed with ``kill -9``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden import AsyncLimiter, CircuitBreaker, Rate
from ratewarden.errors import CircuitOpenError, StorageUnavailableError
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.storage.split import AsyncSplitStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._load import TIMEOUT
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, request

pytestmark = [pytest.mark.faults, pytest.mark.redis]

SECOND, MINUTE = Rate(1000, 1), Rate(1000, 60)

DOMAIN = "split"
RULES = f"""\
domain: {DOMAIN}
descriptors:
  - key: burst
    rate_limit: {{unit: second, requests_per_unit: 1000, failure_mode: closed}}
  - key: steady
    rate_limit: {{unit: minute, requests_per_unit: 1000, failure_mode: closed}}
"""


@pytest.fixture
def two_redis() -> Iterator[tuple[RedisServer, RedisServer]]:
    main, fast = RedisServer(), RedisServer()
    try:
        yield main, fast
    finally:
        main.stop()
        fast.stop()


def kill(server: RedisServer) -> None:
    server.process.kill()
    server.process.wait(5)


def test_the_split_store_names_each_stores_nodes() -> None:
    """Per-second calls are on ``per-second``; every other call, slot, op and stored key on
    the main store's node ("" for a store with one node, or none named)."""
    split = AsyncSplitStore(AsyncMemoryStore(), AsyncMemoryStore())
    assert split.node_of("k", rates=SECOND) == "per-second"
    assert split.node_of("k", rates=[SECOND, Rate(5, 10)]) == "per-second"
    assert split.node_of("k", rates=MINUTE) == ""
    assert split.node_of("k", rates=[SECOND, MINUTE]) == ""  # mixed: the main store
    assert split.node_of("k") == ""  # a slot: the main store
    assert split.node_of("rw:{k}:x", stored=True, rates=SECOND) == ""  # an op's key


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dead", ["per-second", "main"])
async def test_a_dead_store_opens_its_own_circuit_and_the_other_keeps_deciding(
    two_redis: tuple[RedisServer, RedisServer], dead: str
) -> None:
    """Two failures on the dead store open its circuit (CircuitOpenError, no store call);
    the other store's counters are still decided by Redis, and a batch over both stores is
    declined (None) rather than refused by the first key's circuit."""
    main_server, fast_server = two_redis
    clock = ManualClock()
    main = AsyncRedisStore.from_url(main_server.url, clock=clock, timeout=TIMEOUT)
    fast = AsyncRedisStore.from_url(fast_server.url, clock=clock, timeout=TIMEOUT)
    breaker = CircuitBreaker(
        failures=2, failure_ratio=None, cooldown=30.0, clock=clock, per_node=True
    )
    limiter = AsyncLimiter(AsyncSplitStore(main, fast), breaker=breaker)
    dead_rate, live_rate = (SECOND, MINUTE) if dead == "per-second" else (MINUTE, SECOND)
    try:
        assert (await limiter.hit("a", dead_rate)).remaining == 999
        assert (await limiter.hit("a", live_rate)).remaining == 999
        kill(fast_server if dead == "per-second" else main_server)
        for _ in range(2):
            with pytest.raises(StorageUnavailableError):
                await limiter.hit("a", dead_rate)
        where = "per-second" if dead == "per-second" else ""
        assert breaker.states()[where] == "open"
        with pytest.raises(CircuitOpenError):
            await limiter.hit("a", dead_rate)
        remaining = [(await limiter.hit("a", live_rate)).remaining for _ in range(3)]
        assert remaining == [998, 997, 996]
        both = [("a", (dead_rate,), 1), ("b", (live_rate,), 1)]
        assert await limiter.hit_all(both) is None
        found = await limiter.hit_all([("b", (live_rate,), 1)])
        assert found is not None and found[0].remaining == 999  # the declined batch sent nothing
    finally:
        await asyncio.gather(main.aclose(), fast.aclose(), return_exceptions=True)


@pytest.mark.timeout(60)
async def test_serve_keeps_deciding_the_main_counters_when_the_per_second_redis_dies(
    two_redis: tuple[RedisServer, RedisServer], start_server: StartServer
) -> None:
    """``ratewarden serve --store-per-second``: with the per-second Redis dead, its rule's
    calls open the ``per-second`` circuit (a ``closed`` rule answers OVER_LIMIT), while the
    per-minute rule on the main Redis is still decided by Redis, alone and in one request
    with the per-second rule."""
    main_server, fast_server = two_redis
    server = await start_server(
        RULES,
        store_url=main_server.url,
        store_per_second=fast_server.url,
        breaker_cooldown=30.0,
    )
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)

        async def codes(*entries: dict[str, str]) -> list[int]:
            reply = await stub.ShouldRateLimit(request(DOMAIN, *entries))
            return [int(status.code) for status in reply.statuses]

        assert await codes({"burst": "u"}, {"steady": "u"}) == [OK, OK]
        kill(fast_server)
        assert [await codes({"burst": "u"}) for _ in range(6)] == [[OVER_LIMIT]] * 6
        breaker = server.service.breaker
        assert breaker is not None
        assert breaker.states()["per-second"] == "open"
        assert breaker.states().get("", "closed") == "closed"
        steady = request(DOMAIN, {"steady": "u"})
        for left in (998, 997, 996):
            reply = await stub.ShouldRateLimit(steady)
            assert reply.statuses[0].code == OK and reply.statuses[0].limit_remaining == left
        # One request on both stores: checked, then charged, each by its own circuit.
        assert await codes({"burst": "u"}, {"steady": "u"}) == [OVER_LIMIT, OK]
