"""Sliding log: never over the limit in any trailing period, exact, and its Redis list
(its Lua twin, expiry and what every algorithm does are in test_properties.py)."""

from __future__ import annotations

import bisect
from functools import partial
from typing import cast

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.algorithms import sliding_log
from ratewarden.storage import _plan
from tests._differential import START_US, run_lua
from tests.algorithms._limiter import NOON, SECOND, limiter_at
from tests.algorithms._runs import FIXTURES, SLIDING_LOG_STEPS

HUNDRED = Rate.parse("100/minute")

make_limiter = partial(limiter_at, "sliding_log")


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


@pytest.mark.redis
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURES)
@given(steps=SLIDING_LOG_STEPS)
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
