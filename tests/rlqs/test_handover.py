"""The graceful hand-over on a ManualClock: TTL 0 for what each stream holds, shares released.

``QuotaService.hand_over`` gives every assignment its open streams hold again with a time
to live of 0 (Envoy expires it at once); after the streams closed, ``release`` makes the
fleet's store forget their shares, so another replica's next round can hand them out,
where without it they stay held for the TTL and an interval (tests/rlqs/test_fleet.py).
"""

from __future__ import annotations

from ratewarden import Limiter, MemoryStore
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
from ratewarden.testing import ManualClock

TENANT = bucket_key({"tenant": "a"})
OPEN = bucket_key({"open": "x"})
RULES = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 10}
  - key: open
    rate_limit: {unlimited: true}
"""


def replicas(clock: ManualClock, count: int) -> list[QuotaService]:
    limiter = Limiter(MemoryStore(clock=clock))
    return [
        QuotaService(loads(RULES), clock=clock, interval=1.0, ttl_s=30,
                     fleet=Fleet(limiter, replica=f"r{index}"))
        for index in range(count)
    ]  # fmt: skip


def test_the_hand_over_sends_what_each_stream_holds_with_a_ttl_of_0() -> None:
    """The same token bucket (so Envoy does not start a full new one) or blanket rule, with
    TTL 0; a stream still waiting for its first assignment is sent nothing."""
    clock = ManualClock()
    quota = QuotaService(loads(RULES), clock=clock, interval=1.0, ttl_s=30)
    one, two, waiting = quota.open(), quota.open(), quota.open()
    quota.report(one, "edge", [Usage(TENANT, 5, 0), Usage(OPEN, 1, 0)])
    quota.report(two, "edge", [Usage(TENANT, 0, 0)])  # joins: waits for the next round
    quota.report(waiting, "edge", [])
    assert sorted(quota.hand_over(), key=lambda a: (a.stream, a.bucket)) == [
        Action(one, OPEN, ALLOW_ALL, ttl_s=0, fill_s=0),
        Action(one, TENANT, Share(60, 10), ttl_s=0, fill_s=60),
    ]


def test_released_shares_go_to_the_other_replica_at_its_next_round() -> None:
    """Two replicas split 60 a minute; one stops gracefully: its Envoy is told to expire its
    share, and once released the other replica's next round hands out the whole limit, 29 s
    before the share would have stopped being held."""
    clock = ManualClock()
    a, b = replicas(clock, 2)
    one, two = a.open(), b.open()
    a.report(one, "edge", [Usage(TENANT, 30, 0)])
    b.report(two, "edge", [Usage(TENANT, 30, 0)])
    for _ in range(2):
        clock.advance(1)
        a.report(one, "edge", [Usage(TENANT, 30, 0)])
        b.report(two, "edge", [Usage(TENANT, 30, 0)])
        a.tick()
        b.tick()
    assert [action.assignment for action in b.tick() + a.tick()] == []  # not a round yet
    [expired] = b.hand_over()
    assert expired == Action(two, TENANT, Share(30, 5), ttl_s=0, fill_s=60)
    b.close(two)
    assert b.release({two}) == 1
    clock.advance(1)
    a.report(one, "edge", [Usage(TENANT, 30, 0)])
    assert [action.assignment for action in a.tick()] == [Share(60, 10)]


def test_a_stream_not_released_keeps_its_share_held() -> None:
    """Only the streams named are released (those that wrote the hand-over): another closed
    stream's share stays held in the store until its TTL and an interval."""
    clock = ManualClock()
    a, b = replicas(clock, 2)
    one, two = a.open(), b.open()
    a.report(one, "edge", [Usage(TENANT, 30, 0)])  # holds the whole limit: first alone
    b.report(two, "edge", [Usage(TENANT, 30, 0)])
    a.close(one)
    assert a.release(set()) == 0
    clock.advance(1)
    b.report(two, "edge", [Usage(TENANT, 30, 0)])
    assert [action.assignment for action in b.tick()] == [DENY_ALL]


def test_without_a_fleet_there_is_nothing_to_release() -> None:
    clock = ManualClock()
    quota = QuotaService(loads(RULES), clock=clock, interval=1.0, ttl_s=30)
    one = quota.open()
    quota.report(one, "edge", [Usage(TENANT, 5, 0)])
    quota.close(one)
    assert quota.release({one}) == 0
