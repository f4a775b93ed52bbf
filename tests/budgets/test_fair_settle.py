"""Fair shares reserved then settled, on every store: refunds under the busy-period rule,
idempotent settles, overruns, the W of the reserve, bad input."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import ConfigurationError, MemoryStore, Rate
from ratewarden.budgets import AsyncFairShare, FairShare
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.budgets.conftest import Harness, settle
from tests.budgets.test_budget_properties import _worst_excess

POOL = "60000/minute"  # 1,000 tokens a second, a burst of 60,000
WEIGHTS = {"interactive": 3, "batch": 1}


def _fair(h: Harness, pool: Rate | str = POOL, **options: Any) -> Any:
    cls = AsyncFairShare if h.is_async else FairShare
    return cls(h.store, pool, WEIGHTS, **options)


def _left(settlement: Any) -> tuple[int, int]:
    """The pool's and the tenant's room after a settle."""
    return (
        settlement.decision.axis("pool").remaining,
        settlement.decision.axis("tenant").remaining,
    )


async def test_worked_example_reserve_1000_at_a_quarter_share_settle_250(
    stores: Callable[..., Harness],
) -> None:
    """W = 4, w = 1: the pool is charged 1,000 and batch's bucket 4,000; at 250 used the pool
    gets 750 back and the bucket 4,000 - 1,000 = 3,000."""
    h = stores()
    fair = _fair(h)
    assert await settle(fair.hit("gpu", "interactive", 100))
    reservation = await settle(fair.reserve("gpu", "batch", 1000))
    assert reservation and not reservation.replayed
    decision = reservation.decision
    assert (decision.charged, decision.active_weight, decision.remaining) == (4000, 4, 58_900)
    done = await settle(fair.settle(reservation, 250))
    assert done.status == "settled" and done.applied
    assert done.refunded == {"pool": 750, "tenant": 3000}
    assert _left(done) == (59_650, 59_000)


async def test_settle_twice_refunds_once_and_a_reserve_replays(
    stores: Callable[..., Harness],
) -> None:
    """A second settle (by the object or by id, from another FairShare) changes nothing; a
    reserve under a known id charges nothing; an id never reserved is unknown."""
    h = stores()
    fair, other = _fair(h), _fair(h)
    first = await settle(fair.reserve("gpu", "batch", 1000, reservation_id="req-1"))
    again = await settle(fair.reserve("gpu", "batch", 1000, reservation_id="req-1"))
    assert again and again.replayed and again.decision.remaining == 59_000
    done = await settle(other.settle_id("gpu", "batch", "req-1", 400))
    assert (done.status, done.refunded) == ("settled", {"pool": 600, "tenant": 600})
    twice = await settle(fair.settle(first, 0))
    assert (twice.status, twice.refunded) == ("already-settled", {"pool": 0, "tenant": 0})
    assert _left(twice) == (59_600, 59_600)
    assert (await settle(fair.settle_id("gpu", "batch", "never", 0))).status == "unknown"
    # The record is the tenant's: another tenant's settle of the same id finds nothing.
    mine = await settle(fair.reserve("gpu", "batch", 500, reservation_id="req-2"))
    assert (await settle(fair.settle_id("gpu", "interactive", "req-2", 0))).status == "unknown"
    assert (await settle(fair.cancel(mine))).refunded == {"pool": 500, "tenant": 500}


async def test_a_record_expires_and_a_late_settle_is_unknown(
    stores: Callable[..., Harness],
) -> None:
    """After reservation_ttl the record is gone: nothing is refunded, nothing changes."""
    h = stores()
    fair = _fair(h, reservation_ttl=5)
    reservation = await settle(fair.reserve("gpu", "batch", 50_000))
    h.clock.advance(6)
    late = await settle(fair.settle(reservation, 0))
    assert (late.status, late.refunded) == ("unknown", {"pool": 0, "tenant": 0})
    assert _left(late) == (16_000, 16_000)


async def test_a_settle_after_the_busy_period_ended_refunds_nothing(
    stores: Callable[..., Harness],
) -> None:
    """1,000 reserved; both buckets rest after 1 s; a new hit starts another busy period: the
    settle refunds nothing (the rest gave the excess back), and its record is settled."""
    h = stores()
    fair = _fair(h)
    reservation = await settle(fair.reserve("gpu", "batch", 1000))
    h.clock.advance(2)
    assert await settle(fair.hit("gpu", "batch", 500))
    done = await settle(fair.settle(reservation, 0))
    assert (done.status, done.refunded) == ("settled", {"pool": 0, "tenant": 0})
    assert _left(done) == (59_500, 59_500)


async def test_an_overrun_is_charged_up_to_an_empty_bucket(
    stores: Callable[..., Harness],
) -> None:
    """6,000 a minute, W = 4: 1,000 reserved (4,000 on batch's bucket), 3,000 used. The pool
    takes 2,000 more; the bucket would take 12,000 - 4,000 but only 2,000 were left."""
    h = stores()
    fair = _fair(h, "6000/minute")
    assert await settle(fair.hit("gpu", "interactive", 100))
    reservation = await settle(fair.reserve("gpu", "batch", 1000))
    done = await settle(fair.settle(reservation, 3000))
    assert done.refunded == {"pool": -2000, "tenant": -2000}
    assert _left(done) == (2900, 0)
    assert not await settle(fair.hit("gpu", "batch", 1))


async def test_the_settle_prices_the_bucket_at_the_weight_of_the_reserve(
    stores: Callable[..., Harness],
) -> None:
    """A reserve made alone (W = 1) settles at W = 1 after interactive joined (W = 4 now); one
    made at W = 4 settles at W = 4 after interactive went quiet (W = 1 now)."""
    h = stores()
    fair = _fair(h, active_window=0.2)
    alone = await settle(fair.reserve("gpu", "batch", 1000))
    assert alone.decision.charged == 1000
    joined = await settle(fair.hit("gpu", "interactive", 100))
    assert joined.active_weight == 4
    done = await settle(fair.settle(alone, 250))
    assert done.refunded == {"pool": 750, "tenant": 750}  # not 1,000 - 4 * 250 = 0
    h.clock.advance(10)  # everything rests
    assert await settle(fair.hit("gpu", "interactive", 100))
    shared = await settle(fair.reserve("gpu", "batch", 1000))
    assert (shared.decision.charged, shared.decision.active_weight) == (4000, 4)
    h.clock.advance(0.5)  # interactive has left W; the bucket is still 3,500 ahead
    assert (await settle(fair.hit("gpu", "batch", 0))).active_weight == 1
    done = await settle(fair.settle(shared, 250))
    # the tenant: 4,000 - 4 * 250 (not 4,000 - 250); the pool: 1,100 charged, 500 drained
    assert done.refunded == {"pool": 600, "tenant": 3000}


async def test_a_hit_between_reserve_and_settle_keeps_the_refund_and_bounds_it(
    stores: Callable[..., Harness],
) -> None:
    """A hit keeps the busy period and counts what it charged: a settle after it refunds the
    unused part in full while that leaves the hit's units standing, and no more when it would
    not (1,000 a minute: 667 reserved, 40 s, a hit of 600, the settle gives back at most the
    0.3 unit the reservation still held, so a second 600 is refused)."""
    h = stores()
    fair = _fair(h)
    reservation = await settle(fair.reserve("gpu", "batch", 1000))
    h.clock.advance(0.1)
    assert await settle(fair.hit("gpu", "batch", 500))
    done = await settle(fair.settle(reservation, 200))
    assert done.refunded == {"pool": 800, "tenant": 800}
    assert _left(done) == (59_400, 59_400)
    small = _fair(h, "1000/minute")
    first = await settle(small.reserve("small", "batch", 667))
    h.clock.advance(40)
    assert await settle(small.hit("small", "batch", 600))
    done = await settle(small.settle(first, 0))
    assert done.refunded == {"pool": 0, "tenant": 0}
    assert not await settle(small.hit("small", "batch", 600))


async def test_random_reserves_settles_and_hits_answer_as_the_blocking_memory_store(
    stores: Callable[..., Harness],
) -> None:
    """400 seeded random reserves (some replayed), settles (under, over, twice, by id, cancels),
    hits and clock steps from 4 tenants (odd weights, idle gaps): every answer of this store
    (the Lua script on Redis and the Cluster, the asyncio twin) equals the blocking memory
    store's (the pure twin)."""
    h = stores()
    rate, weights = Rate(50, 1, burst=200), {"a": 5, "b": 2, "c": 1}
    options: dict[str, Any] = {"active_window": 3, "reservation_ttl": 6}
    cls = AsyncFairShare if h.is_async else FairShare
    theirs = cls(h.store, rate, weights, **options)
    mine = FairShare(MemoryStore(clock=h.clock), rate, weights, **options)
    rng = random.Random(23)
    held: list[Any] = []
    for step in range(600):
        action, tenant = rng.random(), rng.choice("abcd")
        if action < 0.35:
            rid = f"r{step}"
            if held and rng.random() < 0.2:  # the same id again: a replay while it lives
                rid, tenant = held[-1].reservation_id, held[-1].tenant
            estimate = rng.choice([0, 1, 5, 20, 60])
            args = ("pool", tenant, estimate)
            expected = mine.reserve(*args, reservation_id=rid)
            assert expected == await settle(theirs.reserve(*args, reservation_id=rid)), step
            held.append(expected)
        elif action < 0.6 and held:
            reservation = rng.choice(held[-5:])
            actual = rng.choice([0, 1, reservation.estimate, reservation.estimate + 3])
            if rng.random() < 0.2:
                pair = (mine.cancel(reservation), theirs.cancel(reservation))
            elif rng.random() < 0.3:
                by_id = (reservation.pool_key, rng.choice("abcd"), reservation.reservation_id)
                pair = (mine.settle_id(*by_id, actual), theirs.settle_id(*by_id, actual))
            else:
                pair = (mine.settle(reservation, actual), theirs.settle(reservation, actual))
            assert pair[0] == await settle(pair[1]), step
        elif action < 0.8:
            cost = rng.choice([0, 1, 5, 20, 40])
            expected = mine.hit("pool", tenant, cost)
            assert expected == await settle(theirs.hit("pool", tenant, cost)), step
        else:
            h.clock.advance_us(rng.choice([1, 20_000, 70_000, 70_000, 400_000, 3_500_000]))


Step = tuple[str, str, int, int]
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("reserve"),
            st.sampled_from(["interactive", "batch"]),
            st.integers(0, 700),
            st.sampled_from([0, 0, 67, 150, 1000]),
        ),
        st.tuples(st.just("settle"), st.just(""), st.integers(0, 50), st.just(0)),
        st.tuples(
            st.just("hit"),
            st.sampled_from(["interactive", "batch"]),
            st.integers(0, 600),
            st.just(0),
        ),
        st.tuples(
            st.just("wait"),
            st.just(""),
            st.sampled_from([1, 6_000, 2_000_000, 15_000_000, 40_000_000]),
            st.just(0),
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_pools_actual_usage_in_any_interval_fits_burst_plus_rate(sequence: list[Step]) -> None:
    """1,000 a minute, weights 3:1: counting each hit's cost and each reservation's actual
    use (at most its estimate) when it was admitted, no interval of the pool exceeds C + r*t,
    whatever the order of reserves, settles, hits and waits."""
    clock = ManualClock()
    fair = FairShare(MemoryStore(clock=clock), "1000/minute", WEIGHTS)
    open_: list[tuple[Any, int]] = []
    events: list[tuple[int, int]] = []
    for kind, tenant, a, b in sequence:
        if kind == "reserve":
            reservation = fair.reserve("k", tenant, a)
            if reservation:
                open_.append((reservation, min(a, b)))
                events.append((clock.now_us(), min(a, b)))
        elif kind == "settle" and open_:
            reservation, actual = open_.pop(a % len(open_))
            fair.settle(reservation, actual)
        elif kind == "hit" and fair.hit("k", tenant, a):
            events.append((clock.now_us(), a))
        elif kind == "wait":
            clock.advance_us(a)
    assert _worst_excess(events) <= 1e-6


def test_bad_input_is_refused_naming_the_field_and_changes_nothing() -> None:
    """Estimates, actual costs, ids, tenants, reservations and reservation_ttl are checked
    before the store is asked: a ConfigurationError names each, and a reservation survives
    bad settles whole."""
    store = MemoryStore()
    for ttl in (0, -1, float("inf"), "600", True):
        with pytest.raises(ConfigurationError, match="reservation_ttl"):
            FairShare(store, POOL, WEIGHTS, reservation_ttl=ttl)  # type: ignore[arg-type]
    fair = FairShare(store, POOL, WEIGHTS)
    for tenant, estimate, rid, field in (
        ("batch", -1, None, "estimate"),
        ("batch", 1.5, None, "estimate"),
        ("batch", True, None, "estimate"),
        ("", 1, None, "tenant"),
        ("batch", 1, "no spaces", "reservation id"),
        ("batch", 1, "", "reservation id"),
    ):
        with pytest.raises(ConfigurationError, match=field):
            fair.reserve("gpu", tenant, estimate, reservation_id=rid)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="key"):
        fair.reserve("", "batch", 1)
    assert len(store) == 0
    reservation = fair.reserve("gpu", "batch", 1000, reservation_id="req-1")
    kept = len(store)
    for actual in (-1, 2.5, None, True):
        with pytest.raises(ConfigurationError, match="actual"):
            fair.settle(reservation, actual)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="actual"):
            fair.settle_id("gpu", "batch", "req-1", actual)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="FairReservation"):
        fair.settle("req-1", 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="FairReservation"):
        fair.cancel(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="reservation id"):
        fair.settle_id("gpu", "batch", "req 1", 0)
    with pytest.raises(ConfigurationError, match="tenant"):
        fair.settle_id("gpu", "", "req-1", 0)
    assert len(store) == kept
    done = fair.settle(reservation, 0)
    assert done.status == "settled" and done.refunded["pool"] >= 999


@pytest.mark.redis
def test_states_written_before_the_busy_period_was_kept_are_reserved_and_settled(
    redis_server: RedisServer,
) -> None:
    """A pool whose states the script wrote as "tat_us frac" (before it kept since and used):
    a reserve takes them as busy since now, and its settle refunds as on fresh ones."""
    client = redis_server.client()
    client.flushall()
    clock = ManualClock(1_700_000_000.0)
    fair = FairShare(RedisStore(client, clock=clock, timeout=1.0), POOL, WEIGHTS)
    pool, tenants, _ = fair._keys("gpu")
    ahead = f"{clock.now_us() + 500_000} 0"  # 500 tokens ahead
    client.set(pool, ahead)
    client.set(tenants + "batch", ahead)
    reservation = fair.reserve("gpu", "batch", 1000)
    assert reservation.decision.remaining == 58_500
    clock.advance(0.1)
    done = fair.settle(reservation, 200)
    assert (done.status, done.refunded) == ("settled", {"pool": 800, "tenant": 800})
    assert _left(done) == (59_400, 59_400)
    client.close()
