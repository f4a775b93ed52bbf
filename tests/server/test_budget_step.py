"""A request's budget descriptors decided together answer exactly as one by one.

The service decides every budget call of a step (checks, looks, charges) in as few
store steps as the store allows (``RuleBudgets.hit_all``). Seeded random requests mixing
budget checks, charges and request limits, some on the same counter twice, go to that
service and to one that decides each budget call on its own (``OneByOne``: the way
before), on twin stores at the same time: every response (codes, statuses, headers) and
the stored state must be the same, on memory and on a real redis-server, on both twins,
and on a 3-primary Redis Cluster (blocking). A store that is down answers by each rule's
failure mode, the same both ways. On a blocking RedisStore the budget calls of a request
are one pipeline: one round trip, counted by the server.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import redis
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.limiter import Flow
from ratewarden.server import config
from ratewarden.server.descriptors import Item
from ratewarden.server.service import AsyncRateLimitService, RateLimitService
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer, free_port
from tests.server.conftest import ALIGNED, desc

RULES = """
domain: d
descriptors:
  - key: tenant
    budget: {unit: minute, tokens_per_unit: 1000, failure_mode: closed}
  - key: model
    budget: {unit: second, tokens_per_unit: 300}
  - key: shadow
    shadow_mode: true
    budget: {unit: minute, tokens_per_unit: 200}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 3, failure_mode: closed}
"""


class _OneByOne:
    """Each budget call of a step decided on its own, in order: the way before."""

    def _budget_step(self, calls: list[tuple[Item, int]]) -> Flow[None]:
        for item, cost in calls:
            item.result = yield from self._decide(item, cost)  # type: ignore[attr-defined]


class OneByOne(_OneByOne, RateLimitService):
    """``RateLimitService`` deciding budget descriptors one by one."""


class AsyncOneByOne(_OneByOne, AsyncRateLimitService):
    """``AsyncRateLimitService`` deciding budget descriptors one by one."""


def _requests(seed: int, count: int) -> list[tuple[float, Any]]:
    """``count`` (seconds to wait, request) pairs: 1-5 descriptors, budgets mostly."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        descriptors = []
        for _ in range(rng.randint(1, 5)):
            key = rng.choice(["tenant", "tenant", "model", "model", "shadow", "user", "route"])
            value = rng.choice(["a", "b"])
            if key in ("user", "route"):
                hits = rng.choice([None, None, 2])
            else:
                hits = rng.choice([0, 0, rng.randint(1, 400)])
            descriptors.append(desc((key, value), hits=hits))
        request = rls_pb2.RateLimitRequest(domain="d", descriptors=descriptors)
        found.append((rng.choice([0.0, 0.0, 0.05, 0.5, 3.0]), request))
    return found


def _services(new_store: Any, old_store: Any, twin: str, **options: Any) -> tuple[Any, Any]:
    rules = config.loads(RULES)
    new, old = (
        (AsyncRateLimitService, AsyncOneByOne)
        if twin == "async"
        else (
            RateLimitService,
            OneByOne,
        )
    )
    options = {"over_limit_cache": 100, "response_headers": "draft-10", **options}
    return new(rules, new_store, **options), old(rules, old_store, **options)


def _answer(service: Any, request: Any) -> bytes:
    if isinstance(service, AsyncRateLimitService):
        return asyncio.run(service.should_rate_limit_wire(request))  # type: ignore[no-any-return]
    return service.should_rate_limit_wire(request)  # type: ignore[no-any-return]


def _memory_state(store: MemoryStore) -> dict[Any, Any]:
    return dict(store._states)


def _redis_state(client: redis.Redis | redis.RedisCluster, prefix: str) -> dict[bytes, Any]:
    found = {}
    if isinstance(client, redis.RedisCluster):
        keys = client.keys(f"{prefix}:*", target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
    for key in keys:
        kind = client.type(key)
        value = client.hgetall(key) if kind == b"hash" else client.get(key)
        found[key[len(prefix) :]] = (kind, value, client.pttl(key) > 0)
    return found


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize("seed", range(4))
def test_budget_steps_answer_as_one_by_one_on_memory(twin: str, seed: int) -> None:
    """300 random requests: the same wire bytes and the same stored state after each."""
    clock = ManualClock(ALIGNED)
    kind = AsyncMemoryStore if twin == "async" else MemoryStore
    new_store, old_store = kind(clock=clock), kind(clock=clock)
    new, old = _services(new_store, old_store, twin)
    for wait, request in _requests(seed, 300):
        clock.advance(wait)
        assert _answer(new, request) == _answer(old, request)
        assert _memory_state(new_store) == _memory_state(old_store)


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize("seed", range(2))
def test_budget_steps_answer_as_one_by_one_on_redis(
    redis_client: redis.Redis, redis_server: Any, twin: str, seed: int
) -> None:
    """200 random requests on a real redis-server (each way under its own prefix): the
    same wire bytes and the same keys, values and expiries after each."""
    clock = ManualClock(ALIGNED)
    kind = AsyncRedisStore if twin == "async" else RedisStore

    def store(prefix: str) -> Any:
        return kind.from_url(redis_server.url, clock=clock, prefix=prefix, timeout=1.0)

    new_store, old_store = store("new"), store("old")
    new, old = _services(new_store, old_store, twin)
    for wait, request in _requests(100 + seed, 200):
        clock.advance(wait)
        assert _answer(new, request) == _answer(old, request)
        assert _redis_state(redis_client, "new") == _redis_state(redis_client, "old")


@pytest.mark.cluster
def test_budget_steps_answer_as_one_by_one_on_a_cluster(
    cluster_client: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    """200 random requests through the blocking service on the 3-primary Cluster, where a
    request's budget keys are on several primaries (one pipeline to each): the same wire bytes
    and the same keys, values and expiries after each, in fewer round trips in all (the
    primaries' read events; one by one, each budget call was its own)."""
    clock = ManualClock(ALIGNED)

    def store(prefix: str) -> RedisStore:
        return RedisStore.from_url(redis_cluster.url, clock=clock, prefix=prefix, timeout=1.0)

    new_store, old_store = store("new"), store("old")
    new, old = _services(new_store, old_store, "sync")
    admins = [node.client() for node in redis_cluster.nodes]

    def reads() -> int:
        return sum(int(admin.info("stats")["total_reads_processed"]) for admin in admins)

    trips = {new: 0, old: 0}

    def answer(service: Any, request: Any) -> bytes:
        before = reads()
        found = _answer(service, request)
        trips[service] += reads() - before - len(admins)
        return found

    for wait, request in _requests(200, 200):
        clock.advance(wait)
        assert answer(new, request) == answer(old, request)
        assert _redis_state(cluster_client, "new") == _redis_state(cluster_client, "old")
    assert trips[new] < trips[old]
    for admin in admins:
        admin.close()
    new_store.close()
    old_store.close()


def test_a_requests_budget_calls_are_one_round_trip_on_a_blocking_redis_store(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """Three budget descriptors (three checks; three charges) through RateLimitService over
    a blocking RedisStore: one request read by the server for the three (the INFO that
    reads the count is another); one by one took three."""
    store = RedisStore.from_url(redis_server.url, clock=ManualClock(ALIGNED), timeout=1.0)
    new, old = _services(store, store, "sync")
    keys = [("tenant", "a"), ("model", "a"), ("tenant", "b")]
    requests = [
        rls_pb2.RateLimitRequest(domain="d", descriptors=[desc(key, hits=hits) for key in keys])
        for hits in (0, 40)
    ]
    admin = redis_server.client()

    def reads() -> int:
        return int(admin.info("stats")["total_reads_processed"])

    for request in requests:
        for service, trips in ((new, 1), (old, 3)):
            service.should_rate_limit_wire(request)  # connected, scripts loaded
            before = reads()
            service.should_rate_limit_wire(request)
            assert reads() - before - 1 == trips
    admin.close()
    store.close()


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_store_that_is_down_answers_by_each_rules_failure_mode(twin: str) -> None:
    """Nothing listens on the store's port: each rule's failure mode answers (closed
    tenant budgets deny, open model budgets allow), the same both ways, and the charges
    are owed alike."""
    clock = ManualClock(ALIGNED)
    kind = AsyncRedisStore if twin == "async" else RedisStore
    url = f"redis://127.0.0.1:{free_port()}/0"
    new_store = kind.from_url(url, clock=clock, timeout=0.05)
    old_store = kind.from_url(url, clock=clock, timeout=0.05)
    new, old = _services(new_store, old_store, twin)
    for wait, request in _requests(7, 40):
        clock.advance(wait)
        assert _answer(new, request) == _answer(old, request)
    assert new.budgets.owed() == old.budgets.owed() != (0, 0)
