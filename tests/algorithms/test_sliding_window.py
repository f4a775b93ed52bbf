"""Sliding window: the weighted estimate, exact retry times, expiry, and its Lua twin."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from fractions import Fraction

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import ConfigurationError, Limiter, MemoryStore, Rate
from ratewarden.algorithms import sliding_window
from ratewarden.testing import ManualClock
from tests._differential import run_lua, run_python

SECOND = 1_000_000
MS = 1_000
# Hypothesis may reuse a function-scoped Redis client: each example empties it first.
FIXTURES = [HealthCheck.function_scoped_fixture]
NOON = datetime(2024, 3, 1, 12, 0, tzinfo=UTC).timestamp()
FIFTY = Rate.parse("50/minute")


def make_limiter(start: float = NOON) -> tuple[Limiter, ManualClock]:
    clock = ManualClock(start)
    return Limiter(MemoryStore(clock=clock), algorithm="sliding_window"), clock


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


def test_cost_above_limit_is_never_allowed_and_consumes_nothing() -> None:
    """A cost above the limit is denied with retry_after = inf; the counts are untouched."""
    limiter, _ = make_limiter()
    decision = limiter.hit("k", FIFTY, cost=51)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.peek("k", FIFTY).remaining == 50


def test_a_burst_other_than_the_limit_is_rejected() -> None:
    """Windows count limit per period: a different burst names the rate and algorithm."""
    with pytest.raises(ConfigurationError, match=r"50/minute \(burst 10\).*sliding_window"):
        sliding_window.params(Rate.parse("50/minute", burst=10))


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


@settings(max_examples=60)
@given(
    first=st.integers(1, 10),
    steps=st.lists(st.tuples(st.integers(0, 4 * SECOND), st.integers(0, 12)), max_size=20),
)
def test_ttl_is_exactly_when_the_state_is_as_if_never_seen(
    first: int, steps: list[tuple[int, int]]
) -> None:
    """At write + ttl a peek equals a fresh key's; one microsecond earlier it does not."""
    p = sliding_window.params(Rate.parse("10/3s"))
    now = 1_700_000_000 * SECOND
    _, state, ttl = sliding_window.check(p, None, now, first)
    written = now
    for dt, cost in steps:
        now += dt
        outcome, new_state, new_ttl = sliding_window.check(p, state, now, cost)
        if outcome.allowed and cost > 0:
            state, ttl, written = new_state, new_ttl, now
    fresh = sliding_window.check(p, None, written + ttl, 0)[0]
    assert sliding_window.check(p, state, written + ttl, 0)[0] == fresh
    assert sliding_window.check(p, state, written + ttl - 1, 0)[0].remaining < 10


# Every write sets a TTL above one period (2P - elapsed), at least a second here,
# so Redis, which expires keys in real time, never drops a key the simulated
# clock still needs: steps may be any number of microseconds.
DT = st.one_of(
    st.sampled_from([0, 1, 999, 333_333, 714_286, 999_999, 15 * SECOND, 59_999_999, 61 * SECOND]),
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
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS)
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis, rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """The Lua script and the Python reference return identical Decisions on any sequence."""
    redis_client.flushall()
    assert run_lua(redis_client, "sliding_window", "user:1", rates, steps) == run_python(
        "sliding_window", "user:1", rates, steps
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


@pytest.mark.redis
@pytest.mark.cluster
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS, key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, rates: list[Rate], steps: list[tuple[int, int]], key: str
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    assert run_lua(cluster_client, "sliding_window", key, rates, steps) == run_python(
        "sliding_window", key, rates, steps
    )
