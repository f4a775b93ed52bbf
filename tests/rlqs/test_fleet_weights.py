"""Weights through the store: replicas of a rule with ``rlqs_weights`` split it by weight.

Each member's weight is stored with its demand, so a replica's round weighs every
replica's Envoys. The script on a real redis-server and on a 3-primary Redis Cluster is
checked against its Python twin round for round, with weights; the sums and the bound
over random weights are checked in tests/rlqs/test_fleet.py's fleet property.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import quota_shares_op
from ratewarden.server.config import loads
from ratewarden.server.rlqs import DENY_ALL, Fleet, QuotaService, Share, Usage, bucket_key
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer
from tests.rlqs.test_fleet import MakeStore, make_store

__all__ = ["make_store"]  # the fixture, shared with test_fleet.py

TENANT = bucket_key({"tenant": "a"})
WEIGHTED = """\
domain: edge
descriptors:
  - key: tenant
    rlqs_weights: {eu: 3, us: 1}
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 8}
"""


def replicas(store: Any, clock: ManualClock, text: str = WEIGHTED) -> list[QuotaService]:
    """Two quota services over ``store``, replicas ``r0`` and ``r1``."""
    limiter = Limiter(store)
    return [
        QuotaService(
            loads(text), clock=clock, interval=1.0, ttl_s=3, fleet=Fleet(limiter, replica=f"r{i}")
        )
        for i in range(2)
    ]


def test_two_saturated_envoys_on_two_replicas_hold_shares_by_their_weights(
    make_store: MakeStore,
) -> None:
    """eu (weight 3) on one replica, us (weight 1) on the other, both asking far more than
    the limit: once each replica's round has run after both reported, 45 and 15 of 60."""
    clock = ManualClock()
    a, b = replicas(make_store(clock), clock)
    eu, us = a.open("eu"), b.open("us")
    [first] = a.report(eu, "edge", [Usage(TENANT, 500, 0)])
    assert first.assignment == Share(60, 8)  # alone
    [second] = b.report(us, "edge", [Usage(TENANT, 500, 0)])
    assert second.assignment == DENY_ALL  # eu holds it all until a's next round
    clock.advance(1)
    [shrunk] = a.tick()
    [grown] = b.tick()
    assert (shrunk.assignment, grown.assignment) == (Share(45, 6), Share(15, 2))


def test_the_weights_follow_the_peer_names_and_an_unnamed_envoy_weighs_the_default(
    make_store: MakeStore,
) -> None:
    """With ``default: 2``, an Envoy that named no peer weighs 2 against eu's 3: 36 and 24."""
    text = WEIGHTED.replace("{eu: 3, us: 1}", "{eu: 3, us: 1, default: 2}")
    clock = ManualClock()
    a, b = replicas(make_store(clock), clock, text)
    eu, unnamed = a.open("eu"), b.open()
    a.report(eu, "edge", [Usage(TENANT, 500, 0)])
    b.report(unnamed, "edge", [Usage(TENANT, 500, 0)])
    clock.advance(1)
    a.tick()
    [grown] = b.tick()
    clock.advance(1)
    [settled] = a.tick()
    assert (settled.assignment, grown.assignment) == (Share(36, 5), Share(24, 3))


def test_one_process_splits_a_weighted_rule_as_the_fleet_does() -> None:
    """Without a fleet (the memory store in ``ratewarden serve``): the same 45 and 15."""
    clock = ManualClock()
    quota = QuotaService(loads(WEIGHTED), clock=clock, interval=1.0, ttl_s=3)
    eu, us = quota.open("eu"), quota.open("us")
    quota.report(eu, "edge", [Usage(TENANT, 500, 0)])
    quota.report(us, "edge", [Usage(TENANT, 500, 0)])
    clock.advance(1)
    got = {action.stream: action.assignment for action in quota.tick()}
    assert got == {eu: Share(45, 6), us: Share(15, 2)}


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
    ]
)
def script_client(request: pytest.FixtureRequest) -> Any:
    """A client of a real redis-server or of a 3-primary Cluster (emptied per example)."""
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        client: Any = redis.Redis(host="127.0.0.1", port=server.port)
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    yield client
    client.close()


def _flush(client: Any) -> None:
    if isinstance(client, redis.RedisCluster):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushall()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_weighted_script_and_its_python_twin_answer_alike(
    script_client: Any, data: st.DataObject
) -> None:
    """Random rounds of random replicas, members, demands, weights, departures, the shares
    the members hold and what the replica's budget of changes has spent: the Lua script and
    the memory store's twin give the same replies, round for round, weighted or not (a
    round's mode is drawn, as a reload may add or drop a rule's weights)."""
    clock = ManualClock()
    _flush(script_client)
    stores = (MemoryStore(clock=clock), RedisStore(script_client, clock=clock, timeout=1.0))
    tokens = data.draw(st.integers(0, 500), label="tokens")
    burst = data.draw(st.integers(0, 50), label="burst")
    names = [f"r{replica}:{stream}" for replica in range(3) for stream in range(3)]
    for _ in range(data.draw(st.integers(1, 12), label="rounds")):
        replica = data.draw(st.integers(0, 2))
        own = [name for name in names if name.startswith(f"r{replica}:")]
        members = data.draw(st.lists(st.sampled_from(own), unique=True, max_size=3))
        size = len(members)
        demands = data.draw(st.lists(st.integers(0, 10**9), min_size=size, max_size=size))
        weights = data.draw(
            st.one_of(
                st.none(),
                st.lists(st.sampled_from([1, 2, 3, 7, 1_000_000]), min_size=size, max_size=size),
            )
        )
        departed = [name for name in own if name not in members and data.draw(st.booleans())]
        pair = st.tuples(st.integers(0, 300), st.integers(0, 40))
        holding = data.draw(st.lists(pair, min_size=size, max_size=size))
        spent = data.draw(st.one_of(st.none(), st.integers(0, 60)))
        op = quota_shares_op(
            "rw",
            "bucket",
            tokens,
            burst,
            4_000_000,
            list(zip(members, demands, strict=True)),
            departed,
            weights,
            holding,
            spent,
        )
        memory, on_redis = (store.apply(op) for store in stores)
        assert memory == on_redis
        clock.advance(data.draw(st.sampled_from([0.0, 0.25, 1.0, 5.0])))


def test_the_op_refuses_a_negative_spent_or_holding_and_one_missing() -> None:
    """What the budget of changes reads is checked before any call."""
    with pytest.raises(ConfigurationError, match="spent -1 must be >= 0"):
        quota_shares_op("rw", "bucket", 1, 1, 1_000_000, [("r0:1", 0)], spent=-1)
    with pytest.raises(ConfigurationError, match="one \\(tokens, burst\\) >= 0 per member"):
        quota_shares_op("rw", "bucket", 1, 1, 1_000_000, [("r0:1", 0)], holding=[(-1, 0)])
    with pytest.raises(ConfigurationError, match="per member"):
        quota_shares_op("rw", "bucket", 1, 1, 1_000_000, [("r0:1", 0)], holding=[])


def test_the_op_refuses_a_weight_out_of_range_or_one_missing() -> None:
    """One weight per member, 1 to 1,000,000 (the config's bound), checked before any call."""
    with pytest.raises(ConfigurationError, match="one per member"):
        quota_shares_op("rw", "bucket", 1, 1, 1_000_000, [("r0:1", 0)], (), [0])
    with pytest.raises(ConfigurationError, match="one per member"):
        quota_shares_op("rw", "bucket", 1, 1, 1_000_000, [("r0:1", 0), ("r0:2", 0)], (), [1])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_script_and_its_twin_hold_back_the_same_changes(
    script_client: Any, data: st.DataObject
) -> None:
    """Rounds as replicas run them under a budget of changes: each member holds what the
    previous round gave it, demands move, and the replica's spent capacity is drawn up to
    twice the burst (so changes are held back): the script and the memory store's twin
    answer alike, round for round."""
    clock = ManualClock()
    _flush(script_client)
    stores = (MemoryStore(clock=clock), RedisStore(script_client, clock=clock, timeout=1.0))
    tokens = data.draw(st.integers(1, 200), label="tokens")
    burst = data.draw(st.integers(1, 40), label="burst")
    holds: dict[str, tuple[int, int]] = {}
    for _ in range(data.draw(st.integers(2, 15), label="rounds")):
        replica = data.draw(st.integers(0, 2))
        members = [f"r{replica}:{stream}" for stream in range(data.draw(st.integers(1, 3)))]
        demands = data.draw(st.lists(st.integers(0, 10**6), min_size=len(members),
                                     max_size=len(members)))  # fmt: skip
        spent = data.draw(st.integers(0, 2 * burst))
        # what the last round gave it, or now and then another share (one a failed round's
        # reply never delivered, say), so the capacity held binds too
        other = st.tuples(st.integers(0, tokens // 3), st.integers(0, burst))
        holding = [data.draw(st.one_of(st.just(holds.get(name, (0, 0))), other))
                   for name in members]  # fmt: skip
        op = quota_shares_op(
            "rw", "bucket", tokens, burst, 4_000_000,
            list(zip(members, demands, strict=True)), (), None, holding, spent,
        )  # fmt: skip
        memory, on_redis = (store.apply(op) for store in stores)
        assert memory == on_redis
        for index, name in enumerate(members):
            holds[name] = (int(memory[3 + 2 * index]), int(memory[4 + 2 * index]))
        clock.advance(data.draw(st.sampled_from([0.25, 1.0])))
