"""Sliding window: the weighted estimate, exact retry times, and its twin past 2**53.

The properties it has in common with every algorithm are checked in test_properties.py.
"""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.algorithms import sliding_window
from tests._differential import run_lua, run_python
from tests.algorithms._limiter import NOON, SECOND, limiter_at
from tests.algorithms._runs import FIXTURES

FIFTY = Rate.parse("50/minute")

make_limiter = partial(limiter_at, "sliding_window")


def test_previous_minute_weighs_by_the_part_still_in_the_trailing_minute() -> None:
    """50/minute, 42 last minute: 15 s in, 18 pass (estimate 49.5), the next waits 0.714286 s."""
    limiter, clock = make_limiter(NOON + 30)
    assert all(limiter.hit("k", FIFTY).allowed for _ in range(42))
    clock.set(NOON + 75)  # 12:01:15, so the previous minute weighs 45/60
    current = [limiter.hit("k", FIFTY) for _ in range(18)]
    assert all(d.allowed for d in current)
    assert current[16].remaining == 1  # 50 - (42 x 45/60 + 17) = 1.5
    assert current[17].remaining == 0  # 50 - 49.5
    denied = limiter.hit("k", FIFTY)
    assert not denied.allowed
    # 42 x (60 - t)/60 + 19 <= 50 first holds at t = 15.714285714... s, rounded up.
    assert denied.retry_after == 0.714286
    clock.advance_us(714_285)
    assert not limiter.hit("k", FIFTY).allowed
    clock.advance_us(1)
    assert limiter.hit("k", FIFTY).allowed


def test_full_current_window_waits_into_the_next_one() -> None:
    """A cost that cannot fit this window waits until the next window's estimate admits it."""
    limiter, clock = make_limiter(NOON + 10)
    assert limiter.hit("k", FIFTY, cost=40).allowed
    denied = limiter.hit("k", FIFTY, cost=20)
    assert not denied.allowed
    # Next window: 40 x (60 - t)/60 + 20 <= 50 once t >= 15 s, i.e. at 12:01:15.
    assert denied.retry_after == 65.0
    clock.set(NOON + 75)
    assert limiter.hit("k", FIFTY, cost=20).allowed


def test_reset_after_runs_until_both_counts_are_gone() -> None:
    """Counts of this minute weigh until the end of the next; an untouched key resets at 0."""
    limiter, clock = make_limiter(NOON + 15)
    assert limiter.peek("k", FIFTY).reset_after == 0
    limiter.hit("k", FIFTY)
    assert limiter.peek("k", FIFTY).reset_after == 105.0  # to 12:02:00
    clock.set(NOON + 80)
    assert limiter.peek("k", FIFTY).reset_after == 40.0  # only the previous minute is left
    clock.set(NOON + 120)
    assert limiter.peek("k", FIFTY).remaining == 50


def test_refill_after_is_when_the_estimate_admits_one_more() -> None:
    """10/minute. Previous minute 6, then 3 at 12:01:15: estimate 6 * 45/60 + 3 = 7.5, so 2 left.
    Counting those 2 (5 this minute), one more needs 6 * (60 - e)/60 + 6 <= 10, e >= 20 s: 5 s.
    10 at 12:02:30 on a rested key: only next minute, when 10 * (60 - e)/60 + 1 <= 10, e >= 6:
    36 s."""
    rate = Rate.parse("10/minute")
    limiter, clock = make_limiter(NOON + 30)
    for _ in range(6):
        assert limiter.hit("k", rate).allowed
    clock.advance(45)  # 12:01:15
    third = [limiter.hit("k", rate) for _ in range(3)][-1]
    assert (third.remaining, third.refill_after) == (2, 5.0)
    clock.advance(75)  # 12:02:30
    full = [limiter.hit("rested", rate) for _ in range(10)][-1]
    assert (full.remaining, full.refill_after) == (0, 36.0)


TIMED = st.lists(st.tuples(st.integers(0, 4 * SECOND), st.integers(0, 9)), min_size=1, max_size=40)


@settings(max_examples=60)
@given(rate=st.sampled_from(["7/3s", "10/second", "13/7s"]), steps=TIMED)
def test_decisions_match_the_exact_rational_estimate(
    rate: str, steps: list[tuple[int, int]]
) -> None:
    """Admission is estimate + cost <= limit in exact fractions; retry_after is its first us."""
    p = sliding_window.params(Rate.parse(rate))
    limit, period = p
    counts: dict[int, int] = {}
    state = None
    now = 1_700_000_000 * SECOND

    def admits(at: int, cost: int) -> bool:
        window, elapsed = divmod(at, period)
        previous = Fraction(counts.get(window - 1, 0) * (period - elapsed), period)
        return previous + counts.get(window, 0) + cost <= limit

    for dt, cost in steps:
        now += dt
        outcome, new_state, _ttl = sliding_window.check(p, state, now, cost)
        assert outcome.allowed == admits(now, cost)
        if outcome.allowed:
            counts[now // period] = counts.get(now // period, 0) + cost
            state = new_state
        elif cost <= limit:
            wait = outcome.retry_after_us
            assert wait > 0 and admits(now + wait, cost) and not admits(now + wait - 1, cost)


# Above 2**53: limit x period is 8.64e16 for 10**6/day; large costs and odd
# offsets make the products inexact, where only identical rounding keeps the
# twins equal.
HOUR = 3_600 * SECOND
HUGE_DT = st.sampled_from(
    [0, 1, 333_333, 61 * SECOND + 7, HOUR + 1, 6 * HOUR + 999_999, 23 * HOUR + 12_345]
)
HUGE_COSTS = st.sampled_from([0, 1, 99_999, 333_333, 400_001, 999_999, 1_000_001])
HUGE_STEPS = st.lists(st.tuples(HUGE_DT, HUGE_COSTS), min_size=1, max_size=25)
HUGE_RATES = st.sampled_from(
    [[Rate.parse("1000000/day")], [Rate.parse("1000000/day"), Rate.parse("3000000/week")]]
)


@pytest.mark.redis
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURES)
@given(rates=HUGE_RATES, steps=HUGE_STEPS)
def test_lua_twin_matches_python_when_products_pass_2_53(
    redis_client: redis.Redis, rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """10**6/day with costs in the hundreds of thousands: both twins round the same way."""
    redis_client.flushall()
    assert run_lua(redis_client, "sliding_window", "user:1", rates, steps) == run_python(
        "sliding_window", "user:1", rates, steps
    )
