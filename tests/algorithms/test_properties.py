"""What several rate algorithms share, written once and run on each of them.

``FACTS`` holds what differs: the rate each is tried at (100/minute, with a burst of
20 where a separate burst applies) and so what a rested key admits at once. The
buckets (GCRA, token and leaky bucket) admit a burst, then one unit per emission
interval; the windows (fixed, sliding window, sliding log) count a limit per period
and take no separate burst. Each algorithm's own file keeps its worked examples and
the edge cases that are its alone; ``test_effective_window.py`` holds ``refill_after``
against its definition.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import ConfigurationError, Rate
from ratewarden.algorithms import ALGORITHMS
from tests._differential import START_US, run_lua, run_python
from tests.algorithms._limiter import SECOND, limiter_at
from tests.algorithms._runs import BUCKET_RATES, BUCKET_STEPS, FIXTURES, RUNS, Rates, Steps


@dataclass(frozen=True)
class Facts:
    """One algorithm as these tests try it."""

    rate: Rate
    #: What a rested key admits at once: the burst of a bucket, the limit of a window.
    capacity: int


BUCKET = Facts(Rate.parse("100/minute", burst=20), capacity=20)
WINDOW = Facts(Rate.parse("100/minute"), capacity=100)
#: Burst, then one unit per emission interval (0.6 s at 100/minute).
BUCKETS = ["gcra", "leaky_bucket", "token_bucket"]
#: A limit per period, no separate burst.
WINDOWS = ["fixed_window", "sliding_log", "sliding_window"]
FACTS = {**dict.fromkeys(BUCKETS, BUCKET), **dict.fromkeys(WINDOWS, WINDOW)}
EVERY = sorted(FACTS)


# --- every algorithm --------------------------------------------------------------------------


def test_every_algorithm_is_a_bucket_or_a_window_here() -> None:
    """No rate algorithm is left out of these properties: each is one of the kinds above."""
    assert sorted(ALGORITHMS) == EVERY


@pytest.mark.parametrize("algorithm", EVERY)
def test_cost_above_capacity_is_never_allowed_and_consumes_nothing(algorithm: str) -> None:
    """A cost above what a rested key holds is denied with retry_after = inf, on a fresh key
    and on a used one, and takes nothing from either."""
    limiter, _ = limiter_at(algorithm)
    rate, capacity = FACTS[algorithm].rate, FACTS[algorithm].capacity
    for used in (0, 5):
        limiter.hit("k", rate, cost=used)
        decision = limiter.hit("k", rate, cost=capacity + 1)
        assert not decision.allowed
        assert math.isinf(decision.retry_after)
        assert limiter.peek("k", rate).remaining == capacity - used


@pytest.mark.parametrize("algorithm", EVERY)
def test_remaining_counts_down_by_each_cost(algorithm: str) -> None:
    """remaining is what is left after the request: capacity - 1, - 2, ... then down by 4."""
    limiter, _ = limiter_at(algorithm)
    rate, capacity = FACTS[algorithm].rate, FACTS[algorithm].capacity
    counted = [limiter.hit("k", rate).remaining for _ in range(5)]
    assert counted == [capacity - used for used in range(1, 6)]
    assert limiter.hit("k", rate, cost=4).remaining == capacity - 9


@pytest.mark.parametrize("algorithm", EVERY)
def test_peek_consumes_nothing(algorithm: str) -> None:
    """A cost-0 check reports the key and leaves it as it was: the next hit decides exactly as
    on a key never peeked (a leaky bucket's delay included)."""
    limiter, _ = limiter_at(algorithm)
    rate, capacity = FACTS[algorithm].rate, FACTS[algorithm].capacity
    limiter.hit("k", rate, cost=4)
    assert [limiter.peek("k", rate).remaining for _ in range(3)] == [capacity - 4] * 3
    limiter.hit("unpeeked", rate, cost=4)
    assert limiter.hit("k", rate) == limiter.hit("unpeeked", rate)


@pytest.mark.redis
@pytest.mark.parametrize("algorithm", EVERY)
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(data=st.data())
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis, algorithm: str, data: st.DataObject
) -> None:
    """The Lua script and the Python reference return identical Decisions on any sequence."""
    rates, steps = data.draw(RUNS[algorithm])
    redis_client.flushall()
    expected = run_python(algorithm, "user:1", rates, steps)
    assert run_lua(redis_client, algorithm, "user:1", rates, steps) == expected


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", EVERY)
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(data=st.data(), key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, algorithm: str, data: st.DataObject, key: str
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    rates, steps = data.draw(RUNS[algorithm])
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    expected = run_python(algorithm, key, rates, steps)
    assert run_lua(cluster_client, algorithm, key, rates, steps) == expected


# --- the buckets ------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_rested_bucket_admits_its_burst_then_one_every_600ms(algorithm: str) -> None:
    """100/minute with burst 20: 20 pass back to back, the 21st waits exactly 0.6 s (12 s to
    full); 1 us before then it is still denied, at 0.6 s exactly one more passes."""
    limiter, clock = limiter_at(algorithm)
    decisions = [limiter.hit("k", BUCKET.rate) for _ in range(21)]
    assert all(d.allowed for d in decisions[:20])
    assert decisions[19].remaining == 0
    denied = decisions[20]
    assert not denied.allowed and denied.remaining == 0
    assert (denied.retry_after, denied.reset_after) == (0.6, 12.0)
    clock.advance_us(600_000 - 1)
    assert not limiter.hit("k", BUCKET.rate).allowed
    clock.advance_us(1)
    assert limiter.hit("k", BUCKET.rate).allowed
    assert not limiter.hit("k", BUCKET.rate).allowed


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_cost_takes_that_many_units_and_waits_for_them(algorithm: str) -> None:
    """A cost-5 request leaves 15 (full again in 3 s); a cost-20 one then waits 3 s for the 5
    missing and takes nothing; 1.2 s later 2 units are back."""
    limiter, clock = limiter_at(algorithm)
    first = limiter.hit("k", BUCKET.rate, cost=5)
    assert (first.allowed, first.remaining, first.reset_after) == (True, 15, 3.0)
    second = limiter.hit("k", BUCKET.rate, cost=20)
    assert (second.allowed, second.remaining, second.retry_after) == (False, 15, 3.0)
    clock.advance(1.2)
    assert limiter.peek("k", BUCKET.rate).remaining == 17


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_units_come_back_while_idle_and_stop_at_the_burst(algorithm: str) -> None:
    """20 used, 3 s later 5 are back (full 9 s later); after an hour idle no more than the
    burst of 20 passes at once."""
    limiter, clock = limiter_at(algorithm)
    for _ in range(20):
        limiter.hit("k", BUCKET.rate)
    clock.advance(3.0)
    peek = limiter.peek("k", BUCKET.rate)
    assert (peek.remaining, peek.reset_after) == (5, 9.0)
    clock.advance(3_600.0)
    after_idle = [limiter.hit("k", BUCKET.rate) for _ in range(21)]
    assert [d.allowed for d in after_idle] == [True] * 20 + [False]


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_refill_after_is_when_the_next_unit_is_whole(algorithm: str) -> None:
    """A rested key's window is one interval, 0.6 s. One unit used, 0.25 s later: 19 whole
    and 0.25 s of the next, whole (and the key full) 0.35 s later; using the 19 keeps that
    window, and the next request is denied until it ends."""
    limiter, clock = limiter_at(algorithm)
    assert limiter.peek("k", BUCKET.rate).refill_after == 0.6
    limiter.hit("k", BUCKET.rate)
    clock.advance(0.25)
    peek = limiter.peek("k", BUCKET.rate)
    assert (peek.remaining, peek.refill_after, peek.reset_after) == (19, 0.35, 0.35)
    assert limiter.hit("k", BUCKET.rate, cost=19).refill_after == 0.35
    denied = limiter.hit("k", BUCKET.rate)
    assert not denied.allowed and denied.retry_after == denied.refill_after == 0.35


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_twenty_plus_one_hundred_fit_in_one_minute(algorithm: str) -> None:
    """The bound below is tight: the full burst plus one every 0.6 s fills 60 s with 120."""
    limiter, clock = limiter_at(algorithm)
    admitted = sum(limiter.hit("k", BUCKET.rate).allowed for _ in range(20))
    for _ in range(100):
        clock.advance(0.6)
        admitted += limiter.hit("k", BUCKET.rate).allowed
    assert admitted == 120


ARRIVALS = st.lists(
    st.tuples(st.integers(0, 3 * SECOND), st.integers(1, 25)), min_size=1, max_size=60
)


@pytest.mark.parametrize("algorithm", BUCKETS)
@settings(max_examples=60, deadline=None)
@given(arrivals=ARRIVALS)
def test_never_more_than_120_in_any_60_seconds(
    algorithm: str, arrivals: list[tuple[int, int]]
) -> None:
    """Whatever the arrival times, any 60 s interval (ends included) admits at most 20 + 100."""
    limiter, clock = limiter_at(algorithm)
    admitted: list[int] = []
    for gap_us, count in arrivals:
        clock.advance_us(gap_us)
        for _ in range(count):
            if limiter.hit("k", BUCKET.rate).allowed:
                admitted.append(clock.now_us())
    for i, start in enumerate(admitted):
        assert bisect.bisect_right(admitted, start + 60 * SECOND) - i <= 120


@pytest.mark.parametrize("algorithm", BUCKETS)
@pytest.mark.parametrize("text", ["3/second", "30000/second", "7/minute", "1000/hour"])
def test_no_drift_under_steady_overload(algorithm: str, text: str) -> None:
    """Offered far above the rate for a long run, admissions equal burst + rate x time exactly."""
    # A burst of 2 absorbs the lateness of discrete offers (each < T apart): GCRA keeps
    # its schedule k * T, a token bucket's refill between offers does not spill over
    # the top, a leaky bucket's drain does not run dry unused. So every emission
    # interval admits exactly one request, lost or gained to no rounding.
    module = ALGORITHMS[algorithm]
    params = module.params(Rate.parse(text, burst=2))
    n, d, _ = params
    # Offer a request every step_us (well above the rate) for 20,000 emissions' worth.
    step_us = max(1, d // n // 7)
    horizon = 20_000 * d // n
    state = None
    admitted = 0
    now = 0
    while now <= horizon:
        outcome, new_state, _ttl = module.check(params, state, now, 1)
        if outcome.allowed:
            admitted += 1
            state = new_state
        now += step_us
    last = now - step_us
    assert admitted == 2 + (last * n) // d


@pytest.mark.parametrize("algorithm", BUCKETS)
@settings(max_examples=60, deadline=None)
@given(rates=BUCKET_RATES, steps=BUCKET_STEPS)
def test_ttl_is_exactly_when_the_state_equals_never_seen(
    algorithm: str, rates: Rates, steps: Steps
) -> None:
    """At now + ttl a stored bucket answers like no state at all; 1 us earlier it does not."""
    module = ALGORITHMS[algorithm]
    params = module.params(rates[0])
    state, now, expires = None, 0, 0
    for dt, cost in steps:
        now += dt
        outcome, new_state, ttl = module.check(params, state, now, cost)
        if outcome.allowed and cost > 0:
            state, expires = new_state, now + ttl
    if state is None:
        return
    for at in (expires, expires + 7 * SECOND):
        for cost in (0, 1, params[2]):
            assert (
                module.check(params, state, at, cost)[:2]
                == module.check(params, None, at, cost)[:2]
            )
    assert (
        module.check(params, state, expires - 1, 0)[0]
        != module.check(params, None, expires - 1, 0)[0]
    )


# --- the windows ------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_burst_other_than_the_limit_is_rejected(algorithm: str) -> None:
    """Windows count limit per period: a different burst names the rate and algorithm, a burst
    equal to the limit is the same rate."""
    module = ALGORITHMS[algorithm]
    with pytest.raises(ConfigurationError, match=rf"100/minute \(burst 20\).*{algorithm}"):
        module.params(Rate.parse("100/minute", burst=20))
    assert module.params(Rate.parse("100/minute", burst=100)) == (100, 60 * SECOND)


@pytest.mark.parametrize("algorithm", WINDOWS)
@settings(max_examples=60)
@given(
    first=st.integers(1, 10),
    steps=st.lists(st.tuples(st.integers(0, 4 * SECOND), st.integers(0, 12)), max_size=20),
)
def test_ttl_is_exactly_when_the_state_is_as_if_never_seen(
    algorithm: str, first: int, steps: Steps
) -> None:
    """At write + ttl a peek equals a fresh key's; one microsecond earlier it does not."""
    module = ALGORITHMS[algorithm]
    p = module.params(Rate.parse("10/3s"))
    now = START_US
    _, state, ttl = module.check(p, None, now, first)
    written = now
    for dt, cost in steps:
        now += dt
        outcome, new_state, new_ttl = module.check(p, state, now, cost)
        if outcome.allowed and cost > 0:
            state, ttl, written = new_state, new_ttl, now
    fresh = module.check(p, None, written + ttl, 0)[0]
    assert module.check(p, state, written + ttl, 0)[0] == fresh
    assert module.check(p, state, written + ttl - 1, 0)[0].remaining < 10
