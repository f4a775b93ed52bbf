"""Token bucket: burst then refill, the window bound, exactness, expiry, and its Lua twin."""

from __future__ import annotations

import bisect
import math

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.algorithms import token_bucket
from ratewarden.testing import ManualClock
from tests._differential import run_lua, run_python

SECOND = 1_000_000
# Hypothesis may reuse a function-scoped Redis client: each example empties it first.
FIXTURES = [HealthCheck.function_scoped_fixture]
BUCKET = Rate.parse("100/minute", burst=20)  # capacity 20, refill 100 per minute


def make_limiter() -> tuple[Limiter, ManualClock]:
    clock = ManualClock()
    return Limiter(MemoryStore(clock=clock), algorithm="token_bucket"), clock


def test_full_bucket_admits_twenty_then_one_every_600ms() -> None:
    """A rested key spends its 20 tokens at once; the 21st waits 0.6 s for the next token."""
    limiter, clock = make_limiter()
    decisions = [limiter.hit("k", BUCKET) for _ in range(21)]
    assert all(d.allowed for d in decisions[:20])
    assert decisions[19].remaining == 0
    denied = decisions[20]
    assert not denied.allowed
    assert denied.retry_after == 0.6
    assert denied.reset_after == 12.0
    clock.advance(0.6)
    assert limiter.hit("k", BUCKET).allowed
    assert not limiter.hit("k", BUCKET).allowed


def test_remaining_counts_whole_tokens_left() -> None:
    """remaining is the whole tokens left after the request, counting down from capacity - 1."""
    limiter, _ = make_limiter()
    assert [limiter.hit("k", BUCKET).remaining for _ in range(5)] == [19, 18, 17, 16, 15]


def test_tokens_refill_while_idle_and_stop_at_capacity() -> None:
    """An empty bucket regains one token per 0.6 s, and never holds more than 20."""
    limiter, clock = make_limiter()
    for _ in range(20):
        limiter.hit("k", BUCKET)
    clock.advance(3.0)
    assert limiter.peek("k", BUCKET).remaining == 5
    clock.advance(3_600.0)
    after_idle = [limiter.hit("k", BUCKET) for _ in range(21)]
    assert [d.allowed for d in after_idle] == [True] * 20 + [False]


def test_cost_takes_that_many_tokens_and_waits_for_them() -> None:
    """A cost-5 request leaves 15 tokens; a cost-20 request then waits for the 5 missing ones."""
    limiter, _ = make_limiter()
    first = limiter.hit("k", BUCKET, cost=5)
    assert first.allowed and first.remaining == 15
    assert first.reset_after == 3.0
    second = limiter.hit("k", BUCKET, cost=20)
    assert not second.allowed
    assert second.retry_after == 3.0
    assert second.remaining == 15


def test_peek_consumes_nothing() -> None:
    """A cost-0 check reports the bucket and leaves it as it was."""
    limiter, _ = make_limiter()
    limiter.hit("k", BUCKET, cost=4)
    assert [limiter.peek("k", BUCKET).remaining for _ in range(3)] == [16, 16, 16]
    assert limiter.hit("k", BUCKET).remaining == 15


def test_cost_above_capacity_is_never_allowed() -> None:
    """A cost larger than the bucket is denied with retry_after = inf, and takes nothing."""
    limiter, _ = make_limiter()
    decision = limiter.hit("k", BUCKET, cost=21)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.peek("k", BUCKET).remaining == 20


def test_clock_stepping_back_refills_nothing() -> None:
    """A request stamped before the last one waits for the refill to pass the later stamp."""
    params = token_bucket.params(BUCKET)
    state = (0, 10 * SECOND)  # empty at t = 10 s
    outcome, _, _ = token_bucket.check(params, state, 9 * SECOND, 1)
    assert not outcome.allowed
    assert outcome.retry_after_us == SECOND + 600_000
    assert outcome.reset_after_us == SECOND + 12 * SECOND
    # Once the clock is past the stamp again, the refill counts from the stamp only.
    outcome, _, _ = token_bucket.check(params, state, 10 * SECOND + 600_000, 1)
    assert outcome.allowed and outcome.remaining == 0


def test_twenty_plus_one_hundred_fit_in_one_minute() -> None:
    """The bound below is tight: the full burst plus one token every 0.6 s fills 60 s with 120."""
    limiter, clock = make_limiter()
    admitted = sum(limiter.hit("k", BUCKET).allowed for _ in range(20))
    for _ in range(100):
        clock.advance(0.6)
        admitted += limiter.hit("k", BUCKET).allowed
    assert admitted == 120


def test_refill_after_is_when_the_next_token_is_whole() -> None:
    """Capacity 20 refilling 100/minute: a full bucket's window is one token, 0.6 s. One token
    spent, 0.25 s later: 19 whole tokens and 0.25 s worth of the next, whole 0.35 s later."""
    limiter, clock = make_limiter()
    assert limiter.peek("k", BUCKET).refill_after == 0.6
    limiter.hit("k", BUCKET)
    clock.advance(0.25)
    peek = limiter.peek("k", BUCKET)
    assert (peek.remaining, peek.refill_after) == (19, 0.35)
    assert limiter.hit("k", BUCKET, cost=19).refill_after == 0.35
    denied = limiter.hit("k", BUCKET)
    assert not denied.allowed and denied.retry_after == denied.refill_after == 0.35


ARRIVALS = st.lists(
    st.tuples(st.integers(0, 3 * SECOND), st.integers(1, 25)), min_size=1, max_size=60
)


@settings(max_examples=60, deadline=None)
@given(arrivals=ARRIVALS)
def test_never_more_than_120_in_any_60_seconds(arrivals: list[tuple[int, int]]) -> None:
    """Whatever the arrival times, any 60 s interval (ends included) holds at most 20 + 100."""
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
    # A bucket of 2 keeps the refill of a token that arrives between offers (each
    # < T apart) from spilling over the top, so every token is spent exactly once.
    rate = Rate.parse(text, burst=2)
    params = token_bucket.params(rate)
    n, d, _ = params
    step_us = max(1, d // n // 7)
    horizon = 20_000 * d // n
    state = None
    admitted = 0
    now = 0
    while now <= horizon:
        outcome, new_state, _ttl = token_bucket.check(params, state, now, 1)
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
def test_ttl_is_exactly_when_the_state_equals_never_seen(
    rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """At now + ttl a stored bucket answers like no state at all; 1 us earlier it does not."""
    params = token_bucket.params(rates[0])
    state, now, expires = None, 0, 0
    for dt, cost in steps:
        now += dt
        outcome, new_state, ttl = token_bucket.check(params, state, now, cost)
        if outcome.allowed and cost > 0:
            state, expires = new_state, now + ttl
    if state is None:
        return
    for at in (expires, expires + 7 * SECOND):
        for cost in (0, 1, params[2]):
            assert (
                token_bucket.check(params, state, at, cost)[:2]
                == token_bucket.check(params, None, at, cost)[:2]
            )
    assert (
        token_bucket.check(params, state, expires - 1, 0)[0]
        != token_bucket.check(params, None, expires - 1, 0)[0]
    )


@pytest.mark.redis
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS)
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis, rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """The Lua script and the Python reference return identical Decisions on any sequence."""
    redis_client.flushall()
    expected = run_python("token_bucket", "user:1", rates, steps)
    assert run_lua(redis_client, "token_bucket", "user:1", rates, steps) == expected


@pytest.mark.redis
@pytest.mark.cluster
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS, key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, rates: list[Rate], steps: list[tuple[int, int]], key: str
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    expected = run_python("token_bucket", key, rates, steps)
    assert run_lua(cluster_client, "token_bucket", key, rates, steps) == expected
