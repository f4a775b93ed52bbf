"""Leaky bucket: shaper delays, policer denials, exactness, expiry, and its Lua twin."""

from __future__ import annotations

import bisect
import math

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.algorithms import leaky_bucket
from ratewarden.testing import ManualClock
from tests._differential import run_lua, run_python

SECOND = 1_000_000
# Hypothesis may reuse a function-scoped Redis client: each example empties it first.
FIXTURES = [HealthCheck.function_scoped_fixture]
BUCKET = Rate.parse("100/minute", burst=20)  # holds 20, drains one every 0.6 s
INTERVAL_US = 600_000


def make_limiter() -> tuple[Limiter, ManualClock]:
    clock = ManualClock()
    return Limiter(MemoryStore(clock=clock), algorithm="leaky_bucket"), clock


def test_shaper_delay_grows_by_one_interval_per_queued_request() -> None:
    """Requests arriving together are queued 0, 0.6, 1.2, ... s apart; the 21st does not fit."""
    limiter, _ = make_limiter()
    decisions = [limiter.hit("k", BUCKET) for _ in range(21)]
    assert all(d.allowed for d in decisions[:20])
    assert [d.delay for d in decisions[:20]] == [k * INTERVAL_US / SECOND for k in range(20)]
    assert [d.remaining for d in decisions[:3]] == [19, 18, 17]
    denied = decisions[20]
    assert not denied.allowed
    assert denied.delay == 0.0
    assert denied.retry_after == 0.6
    assert denied.reset_after == 12.0


def test_acquire_releases_callers_one_interval_apart() -> None:
    """Limiter.acquire waits out each delay, so a burst of callers leaves at a steady 0.6 s pace."""
    limiter, clock = make_limiter()
    start = clock.now_us()
    departures = []
    for _ in range(5):
        assert limiter.acquire("k", BUCKET).allowed
        departures.append(clock.now_us() - start)
    assert departures == [k * INTERVAL_US for k in range(5)]


def test_policer_denies_at_capacity_until_one_interval_has_drained() -> None:
    """A full bucket denies with retry_after 0.6 s; after 0.6 s exactly one more fits."""
    limiter, clock = make_limiter()
    assert all(limiter.hit("k", BUCKET).allowed for _ in range(20))
    denied = limiter.hit("k", BUCKET)
    assert not denied.allowed and denied.remaining == 0
    assert denied.retry_after == 0.6
    clock.advance(0.599999)
    assert not limiter.hit("k", BUCKET).allowed
    clock.advance(0.000001)
    admitted = limiter.hit("k", BUCKET)
    assert admitted.allowed
    assert admitted.delay == 19 * INTERVAL_US / SECOND
    assert not limiter.hit("k", BUCKET).allowed


def test_bucket_drains_while_idle_and_empties() -> None:
    """20 queued, 3 s later 5 have leaked out; after an hour the bucket is empty again."""
    limiter, clock = make_limiter()
    for _ in range(20):
        limiter.hit("k", BUCKET)
    clock.advance(3.0)
    peek = limiter.peek("k", BUCKET)
    assert peek.remaining == 5
    assert peek.reset_after == 9.0
    next_one = limiter.hit("k", BUCKET)
    assert next_one.delay == 9.0
    clock.advance(3_600.0)
    rested = limiter.hit("k", BUCKET)
    assert rested.delay == 0.0 and rested.remaining == 19


def test_cost_queues_that_many_intervals_of_work() -> None:
    """Cost 5 fills 5 slots: the next request waits 3 s, and a cost-15 one waits for a slot."""
    limiter, _ = make_limiter()
    first = limiter.hit("k", BUCKET, cost=5)
    assert first.allowed and first.delay == 0.0 and first.remaining == 15
    second = limiter.hit("k", BUCKET)
    assert second.allowed and second.delay == 3.0
    third = limiter.hit("k", BUCKET, cost=15)
    assert not third.allowed
    assert third.retry_after == 0.6


def test_peek_consumes_nothing() -> None:
    """A cost-0 check reports the bucket and leaves it as it was."""
    limiter, _ = make_limiter()
    limiter.hit("k", BUCKET, cost=4)
    assert [limiter.peek("k", BUCKET).remaining for _ in range(3)] == [16, 16, 16]
    assert limiter.hit("k", BUCKET).delay == 4 * INTERVAL_US / SECOND


def test_cost_above_capacity_is_never_allowed() -> None:
    """A cost larger than the bucket is denied with retry_after = inf, and adds nothing."""
    limiter, _ = make_limiter()
    decision = limiter.hit("k", BUCKET, cost=21)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.peek("k", BUCKET).remaining == 20


def test_clock_stepping_back_drains_nothing() -> None:
    """A request stamped before the last one counts drain and delay from the later stamp."""
    params = leaky_bucket.params(BUCKET)
    d = params[1]
    state = (2 * d, 10 * SECOND)  # two queued at t = 10 s
    outcome, new_state, ttl = leaky_bucket.check(params, state, 9 * SECOND, 1)
    assert outcome.allowed
    assert outcome.delay_us == SECOND + 2 * INTERVAL_US
    assert new_state == (3 * d, 10 * SECOND)
    assert ttl == SECOND + 3 * INTERVAL_US


def test_refill_after_is_when_room_for_one_more_has_drained() -> None:
    """Holding 20, draining one every 0.6 s: an empty bucket's window is 0.6 s. One request
    in, 0.25 s later: room for 19 and 0.25 s of the next, which has drained 0.35 s later.
    The shaper's delay is the queue's, apart from it."""
    limiter, clock = make_limiter()
    assert limiter.peek("k", BUCKET).refill_after == 0.6
    limiter.hit("k", BUCKET)
    clock.advance(0.25)
    peek = limiter.peek("k", BUCKET)
    assert (peek.remaining, peek.refill_after) == (19, 0.35)
    queued = limiter.hit("k", BUCKET, cost=19)
    assert queued.refill_after == 0.35 and queued.delay == 0.35
    denied = limiter.hit("k", BUCKET)
    assert not denied.allowed and denied.retry_after == denied.refill_after == 0.35


ARRIVALS = st.lists(
    st.tuples(st.integers(0, 3 * SECOND), st.integers(1, 25)), min_size=1, max_size=60
)


@settings(max_examples=60, deadline=None)
@given(arrivals=ARRIVALS)
def test_never_more_than_120_in_any_60_seconds(arrivals: list[tuple[int, int]]) -> None:
    """Whatever the arrival times, any 60 s interval (ends included) admits at most 20 + 100."""
    limiter, clock = make_limiter()
    admitted: list[int] = []
    for gap_us, count in arrivals:
        clock.advance_us(gap_us)
        for _ in range(count):
            if limiter.hit("k", BUCKET).allowed:
                admitted.append(clock.now_us())
    for i, start in enumerate(admitted):
        assert bisect.bisect_right(admitted, start + 60 * SECOND) - i <= 120


@pytest.mark.parametrize("text", ["3/second", "30000/second", "7/minute", "1000/hour"])
def test_no_drift_under_steady_overload(text: str) -> None:
    """Offered far above the rate for a long run, admissions equal burst + rate x time exactly."""
    # A bucket of 2 keeps the drain between offers (each < T apart) from running
    # dry unused, so every emission interval admits exactly one request.
    rate = Rate.parse(text, burst=2)
    params = leaky_bucket.params(rate)
    n, d, _ = params
    step_us = max(1, d // n // 7)
    horizon = 20_000 * d // n
    state = None
    admitted = 0
    now = 0
    while now <= horizon:
        outcome, new_state, _ttl = leaky_bucket.check(params, state, now, 1)
        if outcome.allowed:
            admitted += 1
            state = new_state
        now += step_us
    last = now - step_us
    assert admitted == 2 + (last * n) // d


RATES = st.sampled_from(
    [
        [Rate.parse("100/minute", burst=20)],
        [Rate.parse("3/second")],
        [Rate.parse("3/second"), Rate.parse("20/minute")],
        [Rate.parse("7/minute", burst=3), Rate.parse("5/10s", burst=2)],
    ]
)
STEPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 999, 333_333, 600_000, 1_500_000, 61 * SECOND, -250_000]),
        st.sampled_from([0, 1, 1, 1, 2, 3, 7, 21]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(rates=RATES, steps=STEPS)
def test_policer_admits_exactly_what_the_token_bucket_admits(
    rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """The leaky level is the token bucket's missing tokens: same verdicts, remaining and waits."""
    leaky = run_python("leaky_bucket", "k", rates, steps)
    tokens = run_python("token_bucket", "k", rates, steps)
    for ours, theirs in zip(leaky, tokens, strict=True):
        assert (ours.allowed, ours.remaining, ours.retry_after, ours.reset_after) == (
            theirs.allowed,
            theirs.remaining,
            theirs.retry_after,
            theirs.reset_after,
        )


@settings(max_examples=60, deadline=None)
@given(rates=RATES, steps=STEPS)
def test_ttl_is_exactly_when_the_state_equals_never_seen(
    rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """At now + ttl a stored bucket answers like no state at all; 1 us earlier it does not."""
    params = leaky_bucket.params(rates[0])
    state, now, expires = None, 0, 0
    for dt, cost in steps:
        now += dt
        outcome, new_state, ttl = leaky_bucket.check(params, state, now, cost)
        if outcome.allowed and cost > 0:
            state, expires = new_state, now + ttl
    if state is None:
        return
    for at in (expires, expires + 7 * SECOND):
        for cost in (0, 1, params[2]):
            assert (
                leaky_bucket.check(params, state, at, cost)[:2]
                == leaky_bucket.check(params, None, at, cost)[:2]
            )
    assert (
        leaky_bucket.check(params, state, expires - 1, 0)[0]
        != leaky_bucket.check(params, None, expires - 1, 0)[0]
    )


@pytest.mark.redis
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS)
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis, rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """The Lua script and the Python reference return identical Decisions, delays included."""
    redis_client.flushall()
    expected = run_python("leaky_bucket", "user:1", rates, steps)
    assert run_lua(redis_client, "leaky_bucket", "user:1", rates, steps) == expected


@pytest.mark.redis
@pytest.mark.cluster
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS, key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, rates: list[Rate], steps: list[tuple[int, int]], key: str
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    expected = run_python("leaky_bucket", key, rates, steps)
    assert run_lua(cluster_client, "leaky_bucket", key, rates, steps) == expected
