"""Several quota services over one store (``Fleet``): the shares of one budget add up.

Each ``QuotaService`` is a ``ratewarden serve`` replica with its own streams; a bucket's
round runs the ``quota_shares`` op (``storage/lua/quota_shares.lua`` on Redis, its pure
twin on the memory store) through the replica's ``Limiter``. The stated bound
(docs/rlqs.md#several-replicas): at any instant the tokens per fill held fleet-wide add
up to at most ``L`` and their capacity to at most ``M = max(burst, Envoys)``; over any
window of ``W`` seconds the Envoys admit at most ``r*W + M*(R*(floor(W/(K*I)) + 1) + 1)``
with ``R`` replicas and a budget of changes over ``K`` rounds (``K = 1``: ``r*W +
M*(R*(floor(W/I) + 1) + 1)``). Time is a ``ManualClock`` handed to every store (a Redis
store then sends it as the scripts' now instead of reading ``TIME``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import AsyncLimiter, Limiter, MemoryStore
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import quota_shares_op
from ratewarden.server.config import loads
from ratewarden.server.rlqs import (
    ALLOW_ALL,
    DENY_ALL,
    Action,
    Fleet,
    QuotaService,
    Share,
    Usage,
    bucket_key,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer
from tests.rlqs._envoy import (
    TENANT,
    assert_fresh_within,
    assert_within_bound,
    bound_limit,
    draw_schedule,
    play,
)

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def rules(limit: str = "{algorithm: token_bucket, unit: minute, requests_per_unit: 60}") -> str:
    return f"domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {limit}\n"


#: A store on ``clock``, emptied: one for the whole fleet.
MakeStore = Callable[[ManualClock], Any]


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
    ]
)
def make_store(request: pytest.FixtureRequest) -> Iterator[MakeStore]:
    """A maker of empty stores of one kind: memory, a real redis-server, a 3-primary Cluster."""
    if request.param == "memory":
        yield lambda clock: MemoryStore(clock=clock)
        return
    client: Any
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        client = redis.Redis(host="127.0.0.1", port=server.port)
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)

    def make(clock: ManualClock) -> RedisStore:
        if request.param == "redis":
            client.flushall()
        else:
            client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
        return RedisStore(client, clock=clock, timeout=1.0)

    yield make
    client.close()


def replicas(
    store: Any,
    clock: ManualClock,
    count: int,
    text: str | None = None,
    local: bool = False,
    change_rounds: int = 1,
) -> list[QuotaService]:
    """``count`` quota services over ``store``, replicas ``r0``, ``r1``, ...; with ``local``,
    one quota service that keeps its shares in its process (no fleet)."""
    limiter = Limiter(store)
    return [
        QuotaService(
            loads(text or rules()),
            clock=clock,
            interval=1.0,
            ttl_s=3,
            fleet=None if local else Fleet(limiter, replica=f"r{index}"),
            change_rounds=change_rounds,
        )
        for index in range(count)
    ]


def test_a_replica_alone_hands_out_the_limit_and_a_second_one_gets_room_as_the_first_shrinks(
    make_store: MakeStore,
) -> None:
    """The second replica's Envoy gets nothing while the first holds the whole limit, then
    each replica's next round moves to the fair split: the shares never add up above L."""
    clock = ManualClock()
    a, b = replicas(make_store(clock), clock, 2)
    one, two = a.open(), b.open()
    [first] = a.report(one, "edge", [Usage(TENANT, 30, 0)])
    assert first.assignment == Share(60, 60)
    [second] = b.report(two, "edge", [Usage(TENANT, 30, 0)])
    assert second.assignment == DENY_ALL  # the fair half is held by a's Envoy still
    clock.advance(1)
    [shrunk] = a.tick()
    assert shrunk.assignment == Share(30, 30)
    [grown] = b.tick()
    assert grown.assignment == Share(30, 30)


def test_a_closed_streams_share_stays_held_in_the_store_until_its_ttl_and_an_interval(
    make_store: MakeStore,
) -> None:
    """A stream that closes on one replica keeps its share held fleet-wide for TTL plus an
    interval after it was sent (its Envoy may still enforce it); then it is free."""
    clock = ManualClock()
    a, b = replicas(make_store(clock), clock, 2)
    one = a.open()
    a.report(one, "edge", [Usage(TENANT, 5, 0)])
    a.close(one)
    two = b.open()
    [action] = b.report(two, "edge", [Usage(TENANT, 5, 0)])
    assert action.assignment == DENY_ALL
    clock.advance(3.5)  # TTL 3 s + interval 1 s after the share was sent: not yet
    assert [action.assignment for action in b.tick()] == [DENY_ALL]
    clock.advance(1)
    assert [action.assignment for action in b.tick()] == [Share(60, 60)]


def test_a_replicas_change_that_does_not_fit_its_budget_keeps_its_envoys_share(
    make_store: MakeStore,
) -> None:
    """K = 3: replica a's Envoy got the whole limit (60 of capacity spent at 0 s). When b's
    Envoy asks too, a's shrink to half would hand out 30 more within 3 s: a's Envoy keeps its
    share, sent unchanged, and b's gets nothing (a holds it all) until a's window is over at
    3 s; then both hold half, b's share within b's own budget."""
    clock = ManualClock()
    a, b = replicas(make_store(clock), clock, 2, change_rounds=3)
    one, two = a.open(), b.open()
    [first] = a.report(one, "edge", [Usage(TENANT, 30, 0)])
    assert first.assignment == Share(60, 60)
    [second] = b.report(two, "edge", [Usage(TENANT, 30, 0)])
    assert second.assignment == DENY_ALL
    seen = []
    for _ in range(3):
        clock.advance(1)
        a.report(one, "edge", [Usage(TENANT, 30, 0)])
        b.report(two, "edge", [Usage(TENANT, 30, 0)])
        [mine] = a.tick()
        [theirs] = b.tick()
        seen.append((mine.assignment, theirs.assignment))
    whole, half = Share(60, 60), Share(30, 30)
    assert seen == [(whole, DENY_ALL), (whole, DENY_ALL), (half, half)]
    # a's shrink, at 1 s and 2 s; b's Envoy had no room to hold back (a held it all)
    assert (a.stats.held_back, b.stats.held_back) == (2, 0)


@SETTINGS
@given(
    data=st.data(),
    count=st.integers(1, 3),
    envoys=st.integers(1, 4),
    limit=st.integers(1, 120),
    period=st.sampled_from([1, 10, 60]),
    burst=st.one_of(st.none(), st.integers(1, 200)),
    weights=st.one_of(st.none(), st.lists(st.integers(1, 10), min_size=3, max_size=3)),
    local=st.booleans(),
    change_rounds=st.sampled_from([1, 2, 4]),
)
def test_the_fleet_of_replicas_never_admits_more_than_the_stated_bound_in_any_window(
    make_store: MakeStore,
    data: st.DataObject,
    count: int,
    envoys: int,
    limit: int,
    period: int,
    burst: int | None,
    weights: list[int] | None,
    local: bool,
    change_rounds: int,
) -> None:
    """Random demand, report gaps, joins and leaves, Envoys spread over 1-3 replicas of one
    store (or one process without a fleet), the rule weighted or not (``rlqs_weights`` for
    peers p0 and p1 and a default, Envoys naming p0, p1 or nothing), a budget of changes
    over K = 1, 2 or 4 rounds: the shares held never add up above L (tokens) nor max(B, N)
    (capacity), the tokens handed out afresh within any K*I seconds add up to at most R*M,
    and every window's admissions stay within r*W + M*(R*(floor(W/(K*I)) + 1) + 1)."""
    text = rules(bound_limit(limit, period, burst))
    if weights is not None:
        named = f"{{p0: {weights[0]}, p1: {weights[1]}, default: {weights[2]}}}"
        text = text.replace("    rate_limit:", f"    rlqs_weights: {named}\n    rate_limit:")
    local = local and count == 1
    clock = ManualClock()
    fleet = replicas(make_store(clock), clock, count, text, local, change_rounds)
    schedule = draw_schedule(data, envoys, 40)
    homes = data.draw(st.lists(st.integers(0, count - 1), min_size=envoys, max_size=envoys))
    peers = [("p0", "p1", "")[index % 3] for index in range(envoys)]
    played = play(schedule, fleet, clock, homes, peers)
    rate = Fraction(limit, period)
    fleet_burst = max(1, math.ceil(rate)) if burst is None else burst
    most = max(fleet_burst, envoys)
    for shares in played.held:
        assert sum(share.tokens_per_fill for share in shares) <= limit
        assert sum(share.max_tokens for share in shares) <= most
    assert_fresh_within(played.fresh, most, count, change_rounds)
    assert_within_bound(played.admitted, rate, most, count, change_rounds)


def test_bucket_values_with_braces_and_quotes_are_one_hash_in_one_slot(
    make_store: MakeStore,
) -> None:
    """Bucket values are request values: braces, quotes and spaces in them stay inside the
    key's hash tag (one Cluster slot), and two replicas still meet in one hash."""
    clock = ManualClock()
    a, b = replicas(make_store(clock), clock, 2)
    odd = bucket_key({"tenant": 'a}{b "c" %7D'})
    one, two = a.open(), b.open()
    assert [x.assignment for x in a.report(one, "edge", [Usage(odd, 1, 0)])] == [Share(60, 60)]
    assert [x.assignment for x in b.report(two, "edge", [Usage(odd, 1, 0)])] == [DENY_ALL]


def test_a_replica_name_must_be_ascii_without_spaces() -> None:
    """The replica's name is part of every member's name in the store."""
    with pytest.raises(ConfigurationError, match="without spaces"):
        Fleet(Limiter(MemoryStore()), replica="my host")


@pytest.mark.redis
def test_a_round_the_store_does_not_answer_sends_nothing_split_and_the_next_one_retries(
    make_redis: Callable[..., RedisServer],
) -> None:
    """With the store gone, a split bucket's round sends nothing (Envoy keeps its assignment
    until the TTL) and is counted; an unlimited bucket is still answered; the store back,
    the next round assigns again."""
    text = rules() + "  - key: open\n    rate_limit: {unlimited: true}\n"
    server = make_redis()
    clock = ManualClock()
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=0.5)
    try:
        [quota] = replicas(RedisStore(client, clock=clock, timeout=0.5), clock, 1, text)
        one = quota.open()
        [first] = quota.report(one, "edge", [Usage(TENANT, 1, 0)])
        assert first.assignment == Share(60, 60)
        port = server.port
        server.stop()
        clock.advance(1)
        assert quota.tick() == []
        assert quota.stats.store_failures == 1
        [opened] = quota.report(one, "edge", [Usage(bucket_key({"open": "x"}), 1, 0)])
        assert opened.assignment == ALLOW_ALL
        make_redis(port=port)
        clock.advance(1)
        assert {action.bucket: action.assignment for action in quota.tick()} == {
            TENANT: Share(60, 60),
            bucket_key({"open": "x"}): ALLOW_ALL,
        }
    finally:
        client.close()


@pytest.mark.redis
async def test_an_asyncio_replica_runs_a_ticks_rounds_side_by_side_over_redis(
    redis_server: RedisServer,
) -> None:
    """areport / atick on an AsyncLimiter over a real redis-server: each of three buckets gets
    its first round at its report, and one tick later all three rounds come back together."""
    clock = ManualClock()
    client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
    await client.flushall()
    try:
        limiter = AsyncLimiter(AsyncRedisStore(client, clock=clock, timeout=1.0))
        quota = QuotaService(
            loads(rules()), clock=clock, interval=1.0, ttl_s=3, fleet=Fleet(limiter)
        )
        stream = quota.open()
        tenants = [bucket_key({"tenant": name}) for name in "abc"]
        first = await quota.areport(stream, "edge", [Usage(key, 1, 0) for key in tenants])
        assert [action.assignment for action in first] == [Share(60, 60)] * 3
        clock.advance(1)
        again: list[Action] = []
        assert await quota.atick(again.extend) == 1  # one chunk
        assert {action.bucket: action.assignment for action in again} == {
            key: Share(60, 60) for key in tenants
        }
    finally:
        await client.aclose()


def test_the_op_refuses_a_negative_budget_and_a_member_name_with_a_space() -> None:
    """What the store's hash is keyed and counted by is checked before any store call."""
    with pytest.raises(ConfigurationError, match="must be >= 0"):
        quota_shares_op("rw", "bucket", -1, 1, 1_000_000, [("r0:1", 0)])
    with pytest.raises(ConfigurationError, match="without spaces"):
        quota_shares_op("rw", "bucket", 1, 1, 1_000_000, [("r0 1", 0)])


@pytest.mark.redis
def test_a_share_that_expired_while_the_store_was_away_is_a_change_when_it_comes_back(
    make_redis: Callable[..., RedisServer],
) -> None:
    """K = 5, TTL 3 s: the Envoy's share (60 of capacity, spent at 0 s) is not renewed while
    the store is down, and expires in Envoy at 3 s. Sent again at 4 s, it would start full:
    it is a change like a newcomer's first share, so it waits for the window (DENY_ALL at 4 s,
    the share at 5 s) instead of handing out 60 more tokens unaccounted."""
    server = make_redis()
    clock = ManualClock()
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=0.5)
    try:
        store = RedisStore(client, clock=clock, timeout=0.5)
        [quota] = replicas(store, clock, 1, change_rounds=5)
        one = quota.open()
        [first] = quota.report(one, "edge", [Usage(TENANT, 1, 0)])
        assert first.assignment == Share(60, 60)
        port = server.port
        server.stop()
        for _ in range(3):
            clock.advance(1)
            assert quota.tick() == []
        make_redis(port=port)
        answers = []
        for _ in range(2):
            clock.advance(1)
            quota.report(one, "edge", [Usage(TENANT, 1, 0)])
            answers += [action.assignment for action in quota.tick()]
        assert answers == [DENY_ALL, Share(60, 60)]
    finally:
        client.close()
