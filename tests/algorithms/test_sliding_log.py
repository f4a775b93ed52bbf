"""Sliding log: never over the limit in any trailing period, exact, and its Lua twin."""

from __future__ import annotations

import bisect
import math
from datetime import UTC, datetime
from typing import cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import ConfigurationError, Limiter, MemoryStore, Rate
from ratewarden.algorithms import sliding_log
from ratewarden.storage import _plan
from ratewarden.testing import ManualClock
from tests._differential import START_US, run_lua, run_python

SECOND = 1_000_000
# Hypothesis may reuse a function-scoped Redis client: each example empties it first.
FIXTURES = [HealthCheck.function_scoped_fixture]
NOON = datetime(2024, 3, 1, 12, 0, tzinfo=UTC).timestamp()
HUNDRED = Rate.parse("100/minute")


def make_limiter(start: float = NOON) -> tuple[Limiter, ManualClock]:
    clock = ManualClock(start)
    return Limiter(MemoryStore(clock=clock), algorithm="sliding_log"), clock


def test_admits_the_hundredth_denies_the_next_until_the_oldest_ages_out() -> None:
    """100/minute, one every 0.5 s: the 101st waits until the first is 60 s old, then passes."""
    limiter, clock = make_limiter()
    for i in range(100):
        decision = limiter.hit("k", HUNDRED)
        assert decision.allowed and decision.remaining == 99 - i
        clock.advance(0.5)
    denied = limiter.hit("k", HUNDRED)  # at 50 s
    assert not denied.allowed
    assert denied.retry_after == 10.0
    assert denied.reset_after == 59.5  # the newest entry, from 49.5 s, ages out at 109.5 s
    clock.advance_us(10 * SECOND - 1)
    assert not limiter.hit("k", HUNDRED).allowed
    clock.advance_us(1)
    assert limiter.hit("k", HUNDRED).allowed
    again = limiter.hit("k", HUNDRED)
    assert not again.allowed
    assert again.retry_after == 0.5  # the second entry, from 0.5 s


def test_a_large_cost_waits_for_enough_old_entries() -> None:
    """A request of cost 30 waits until entries worth at least 30 have aged out."""
    limiter, clock = make_limiter()
    for cost in (20, 20, 20, 20, 20):  # at 0, 1, 2, 3, 4 s
        assert limiter.hit("k", HUNDRED, cost=cost).allowed
        clock.advance(1)
    denied = limiter.hit("k", HUNDRED, cost=30)  # at 5 s: the first two must go, at 61 s
    assert not denied.allowed
    assert denied.retry_after == 56.0
    assert denied.remaining == 0


def test_cost_above_limit_is_never_allowed_and_consumes_nothing() -> None:
    """A cost above the limit is denied with retry_after = inf; the log is untouched."""
    limiter, _ = make_limiter()
    limiter.hit("k", HUNDRED, cost=5)
    decision = limiter.hit("k", HUNDRED, cost=101)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.peek("k", HUNDRED).remaining == 95


def test_a_step_back_of_the_clock_never_shortens_an_entry() -> None:
    """An entry admitted after the clock stepped back is stamped with the newest time seen."""
    limiter, clock = make_limiter(NOON + 100)
    assert limiter.hit("k", HUNDRED, cost=99).allowed
    clock.set(NOON + 90)
    assert limiter.hit("k", HUNDRED).allowed
    clock.set(NOON + 150)
    assert limiter.peek("k", HUNDRED).remaining == 0
    clock.set(NOON + 160)
    assert limiter.peek("k", HUNDRED).remaining == 100


def test_a_burst_other_than_the_limit_is_rejected() -> None:
    """The log counts limit per period: a different burst names the rate and algorithm."""
    with pytest.raises(ConfigurationError, match=r"100/minute \(burst 5\).*sliding_log"):
        sliding_log.params(Rate.parse("100/minute", burst=5))


def test_refill_after_is_when_the_oldest_entry_ages_out() -> None:
    """3/minute, requests at 12:00:00 and 12:00:10; at 12:00:25 one is left, and once it is used
    the entry of 12:00:00 is the first to age out, 35 s later. An empty log: one period."""
    rate = Rate.parse("3/minute")
    limiter, clock = make_limiter()
    assert limiter.peek("k", rate).refill_after == 60.0
    limiter.hit("k", rate)
    clock.advance(10)
    limiter.hit("k", rate)
    clock.advance(15)
    peek = limiter.peek("k", rate)
    assert (peek.remaining, peek.refill_after, peek.reset_after) == (1, 35.0, 45.0)
    assert limiter.hit("k", rate).refill_after == 35.0
    denied = limiter.hit("k", rate)
    assert not denied.allowed and denied.retry_after == denied.refill_after == 35.0


ARRIVALS = st.lists(
    st.tuples(st.integers(0, 2 * SECOND), st.integers(0, 9)), min_size=1, max_size=250
)


@settings(max_examples=60, deadline=None)
@given(arrivals=ARRIVALS)
def test_no_trailing_minute_holds_more_than_the_limit_and_no_denial_is_spare(
    arrivals: list[tuple[int, int]],
) -> None:
    """Every trailing 60 s holds at most 100; every denial would have pushed one over 100."""
    limiter, clock = make_limiter()
    times: list[int] = []
    costs: list[int] = []
    window = 60 * SECOND

    def held(at: int) -> int:
        """Admitted cost in the trailing minute (at - 60 s, at]."""
        return sum(costs[bisect.bisect_right(times, at - window) :])

    for dt, cost in arrivals:
        clock.advance_us(dt)
        now = clock.now_us()
        if limiter.hit("k", HUNDRED, cost=cost).allowed:
            times.append(now)
            costs.append(cost)
            assert held(now) <= 100
        else:
            assert held(now) + cost > 100


@settings(max_examples=60)
@given(arrivals=ARRIVALS)
def test_retry_after_is_the_first_microsecond_that_admits(arrivals: list[tuple[int, int]]) -> None:
    """A denial's retry_after admits the same cost at now + retry_after, and not 1 us sooner."""
    p = sliding_log.params(Rate.parse("20/3s"))
    now, state = START_US, None
    for dt, cost in arrivals:
        now += dt
        outcome, new_state, _ttl = sliding_log.check(p, state, now, cost)
        if outcome.allowed:
            state = new_state
        elif outcome.retry_after_us > 0:
            wait = outcome.retry_after_us
            assert sliding_log.check(p, state, now + wait, cost)[0].allowed
            assert not sliding_log.check(p, state, now + wait - 1, cost)[0].allowed


@settings(max_examples=60)
@given(
    first=st.integers(1, 10),
    steps=st.lists(st.tuples(st.integers(0, 4 * SECOND), st.integers(0, 12)), max_size=20),
)
def test_ttl_is_exactly_when_the_state_is_as_if_never_seen(
    first: int, steps: list[tuple[int, int]]
) -> None:
    """At write + ttl a peek equals a fresh key's; one microsecond earlier it does not."""
    p = sliding_log.params(Rate.parse("10/3s"))
    now = START_US
    _, state, ttl = sliding_log.check(p, None, now, first)
    written = now
    for dt, cost in steps:
        now += dt
        outcome, new_state, new_ttl = sliding_log.check(p, state, now, cost)
        if outcome.allowed and cost > 0:
            state, ttl, written = new_state, new_ttl, now
    fresh = sliding_log.check(p, None, written + ttl, 0)[0]
    assert sliding_log.check(p, state, written + ttl, 0)[0] == fresh
    assert sliding_log.check(p, state, written + ttl - 1, 0)[0].remaining < 10


# Every write sets a TTL of at least one period (its new entry is the newest),
# a second or more here, so Redis, which expires keys in real time, never drops
# a key the simulated clock still needs: steps may be any number of microseconds.
DT = st.one_of(
    st.sampled_from([0, 1, 999, 333_333, 999_999, 2_999_999, 59_999_999, 61 * SECOND]),
    st.integers(0, 3 * SECOND),
)
COSTS = st.sampled_from([0, 1, 1, 1, 2, 3, 7, 11])
STEPS = st.lists(st.tuples(DT, COSTS), min_size=1, max_size=40)
RATES = st.sampled_from(
    [
        [Rate.parse("10/second")],
        [Rate.parse("7/3s")],
        [Rate.parse("10/second"), Rate.parse("100/minute")],
        [Rate.parse("5/2s"), Rate.parse("13/7s"), Rate.parse("40/minute")],
    ]
)


@pytest.mark.redis
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS)
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis, rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """The Lua script and the Python reference return identical Decisions on any sequence."""
    redis_client.flushall()
    assert run_lua(redis_client, "sliding_log", "user:1", rates, steps) == run_python(
        "sliding_log", "user:1", rates, steps
    )


@pytest.mark.redis
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURES)
@given(steps=STEPS)
def test_redis_list_is_the_python_log_entry_for_entry(
    redis_client: redis.Redis, steps: list[tuple[int, int]]
) -> None:
    """The Redis list holds "timestamp:cost" for exactly the entries of the Python state."""
    redis_client.flushall()
    rate = Rate.parse("7/3s")
    run_lua(redis_client, "sliding_log", "user:1", [rate], steps)
    p = sliding_log.params(rate)
    now, state = START_US, None
    for dt, cost in steps:
        now += dt
        outcome, new_state, _ttl = sliding_log.check(p, state, now, cost)
        if outcome.allowed and cost > 0:
            state = new_state
    (key,) = _plan.build("sliding_log", "rw", "user:1", rate, 0).keys
    stored = [raw.decode() for raw in cast(list[bytes], redis_client.lrange(key, 0, -1))]
    assert stored == [f"{stamp}:{cost}" for stamp, cost in state or ()]


@pytest.mark.redis
@pytest.mark.cluster
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS, key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, rates: list[Rate], steps: list[tuple[int, int]], key: str
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    assert run_lua(cluster_client, "sliding_log", key, rates, steps) == run_python(
        "sliding_log", key, rates, steps
    )
