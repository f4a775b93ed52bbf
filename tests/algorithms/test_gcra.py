"""GCRA: the worked arithmetic, exactness over long runs, and its Lua twin."""

from __future__ import annotations

import math

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.algorithms import gcra
from ratewarden.testing import ManualClock
from tests._differential import run_lua, run_python

SECOND = 1_000_000


def make_limiter() -> tuple[Limiter, ManualClock]:
    clock = ManualClock()
    return Limiter(MemoryStore(clock=clock), algorithm="gcra"), clock


def test_burst_of_twenty_then_one_every_600ms() -> None:
    """100/minute with burst 20: 20 pass back to back, the 21st waits exactly 0.6 s."""
    limiter, clock = make_limiter()
    rate = Rate.parse("100/minute", burst=20)
    decisions = [limiter.hit("k", rate) for _ in range(21)]
    assert all(d.allowed for d in decisions[:20])
    assert decisions[19].remaining == 0
    denied = decisions[20]
    assert not denied.allowed
    assert denied.retry_after == 0.6
    assert denied.reset_after == 12.0
    clock.advance(0.6)
    assert limiter.hit("k", rate).allowed
    assert not limiter.hit("k", rate).allowed


def test_remaining_counts_down_from_burst_minus_one() -> None:
    """remaining = floor((tau - (TAT - now)) / T) + 1 after each request."""
    limiter, _ = make_limiter()
    rate = Rate.parse("100/minute", burst=20)
    assert [limiter.hit("k", rate).remaining for _ in range(5)] == [19, 18, 17, 16, 15]


def test_cost_advances_by_cost_emission_intervals() -> None:
    """A request of cost c moves the TAT by c * T and leaves capacity - c."""
    limiter, clock = make_limiter()
    rate = Rate.parse("100/minute", burst=20)
    first = limiter.hit("k", rate, cost=5)
    assert first.allowed and first.remaining == 15
    assert first.reset_after == pytest.approx(3.0)
    clock.advance(1.2)
    assert limiter.peek("k", rate).remaining == 17


def test_cost_above_burst_is_never_allowed() -> None:
    """A cost larger than the burst is denied with retry_after = inf, and consumes nothing."""
    limiter, _ = make_limiter()
    rate = Rate.parse("100/minute", burst=20)
    decision = limiter.hit("k", rate, cost=21)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.peek("k", rate).remaining == 20


@pytest.mark.parametrize("text", ["3/second", "30000/second", "7/minute", "1000/hour"])
def test_no_drift_under_steady_overload(text: str) -> None:
    """Offered far above the rate for a long run, admissions equal burst + rate x time exactly."""
    # A burst of 2 absorbs the lateness of discrete offers (each < T late), so the
    # schedule k * T is kept exactly and nothing is lost or gained to rounding.
    rate = Rate.parse(text, burst=2)
    n, d, _ = gcra.params(rate)
    # Offer a request every step_us (well above the rate) for 2,000 periods' worth of emissions.
    step_us = max(1, d // n // 7)
    intervals = 20_000
    horizon = intervals * d // n
    state = None
    admitted = 0
    now = 0
    while now <= horizon:
        outcome, new_state, _ttl = gcra.check(gcra.params(rate), state, now, 1)
        if outcome.allowed:
            admitted += 1
            state = new_state
        now += step_us
    last = now - step_us
    # Exact: admission k (0-based) happens at the first offer at or after (k - 1) * T.
    assert admitted == (last * n) // d + 2


def test_refill_after_is_the_time_to_the_next_unit_not_to_full() -> None:
    """3/minute (issue #15): after 1, 2 and 3 requests the next unit is 20 s away while full is
    20, 40 and 60 s away; the 4th is denied with retry_after and refill_after both 20 s."""
    limiter, clock = make_limiter()
    rate = Rate.parse("3/minute")
    first, second, third, fourth = (limiter.hit("k", rate) for _ in range(4))
    assert (first.remaining, first.refill_after, first.reset_after) == (2, 20.0, 20.0)
    assert (second.remaining, second.refill_after, second.reset_after) == (1, 20.0, 40.0)
    assert (third.remaining, third.refill_after, third.reset_after) == (0, 20.0, 60.0)
    assert not fourth.allowed and fourth.retry_after == fourth.refill_after == 20.0
    clock.advance(20)
    assert limiter.hit("k", rate).allowed


def test_refill_after_counts_the_part_of_a_unit_already_back() -> None:
    """100/minute, burst 20: a rested key's window is one interval, 0.6 s. One request, then
    0.25 s: 19 whole units of room and 0.25 s of the next, which is whole 0.35 s later."""
    limiter, clock = make_limiter()
    rate = Rate.parse("100/minute", burst=20)
    assert limiter.peek("k", rate).refill_after == 0.6
    limiter.hit("k", rate)
    clock.advance(0.25)
    peek = limiter.peek("k", rate)
    assert (peek.remaining, peek.refill_after, peek.reset_after) == (19, 0.35, 0.35)


STEPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 999, 333_333, 600_000, 1_500_000, 61 * SECOND]),
        st.sampled_from([0, 1, 1, 1, 2, 3, 7, 21]),
    ),
    min_size=1,
    max_size=40,
)
RATES = st.sampled_from(
    [
        [Rate.parse("100/minute", burst=20)],
        [Rate.parse("3/second")],
        [Rate.parse("3/second"), Rate.parse("20/minute")],
        # A write's TTL is at least one emission interval: keep it >= 100 ms, since Redis
        # expires keys in real time while the simulated clock may stand still. 30000/second
        # is covered by the pure no-drift test.
        [Rate.parse("7/second", burst=3), Rate.parse("5/10s", burst=2)],
    ]
)


@pytest.mark.redis
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rates=RATES, steps=STEPS)
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis, rates: list[Rate], steps: list[tuple[int, int]]
) -> None:
    """The Lua script and the Python reference return identical Decisions on any sequence."""
    redis_client.flushall()
    assert run_lua(redis_client, "gcra", "user:1", rates, steps) == run_python(
        "gcra", "user:1", rates, steps
    )


@pytest.mark.redis
@pytest.mark.cluster
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rates=RATES, steps=STEPS, key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, rates: list[Rate], steps: list[tuple[int, int]], key: str
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    assert run_lua(cluster_client, "gcra", key, rates, steps) == run_python(
        "gcra", key, rates, steps
    )
