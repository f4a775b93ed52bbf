"""Fixed window: the boundary burst, epoch alignment, expiry, and its Lua twin."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import ConfigurationError, Limiter, MemoryStore, Rate
from ratewarden.algorithms import fixed_window
from ratewarden.testing import ManualClock
from tests._differential import run_lua, run_python

SECOND = 1_000_000
MS = 1_000
# Hypothesis may reuse a function-scoped Redis client: each example empties it first.
FIXTURES = [HealthCheck.function_scoped_fixture]
NOON = datetime(2024, 3, 1, 12, 0, tzinfo=UTC).timestamp()
PER_MINUTE = Rate.parse("100/minute")


def make_limiter(start: float = NOON) -> tuple[Limiter, ManualClock]:
    clock = ManualClock(start)
    return Limiter(MemoryStore(clock=clock), algorithm="fixed_window"), clock


def test_two_hundred_pass_across_the_minute_boundary() -> None:
    """100/minute: 100 at 12:00:59 and 100 at 12:01:00 all pass; the 101st of each is denied."""
    limiter, clock = make_limiter(NOON + 59)
    first = [limiter.hit("k", PER_MINUTE) for _ in range(101)]
    assert all(d.allowed for d in first[:100])
    assert not first[100].allowed
    assert first[100].retry_after == 1.0  # until 12:01:00
    assert first[100].remaining == 0

    clock.advance(1)
    second = [limiter.hit("k", PER_MINUTE) for _ in range(101)]
    assert all(d.allowed for d in second[:100])
    assert not second[100].allowed
    assert second[100].retry_after == 60.0  # until 12:02:00


def test_denied_request_waits_until_the_next_window() -> None:
    """A denial mid-window waits exactly to the next epoch-aligned boundary, then passes."""
    limiter, clock = make_limiter(NOON + 17.25)
    for _ in range(100):
        assert limiter.hit("k", PER_MINUTE).allowed
    denied = limiter.hit("k", PER_MINUTE)
    assert not denied.allowed
    assert denied.retry_after == 42.75
    clock.advance_us(42_750_000 - 1)
    assert not limiter.hit("k", PER_MINUTE).allowed
    clock.advance_us(1)
    assert limiter.hit("k", PER_MINUTE).allowed


def test_remaining_and_reset_after_count_down_to_the_window_end() -> None:
    """remaining = limit - count; reset_after runs to the window end, 0 for an untouched key."""
    limiter, clock = make_limiter(NOON + 20)
    assert limiter.peek("k", PER_MINUTE).reset_after == 0
    assert [limiter.hit("k", PER_MINUTE, cost=c).remaining for c in (1, 4, 10)] == [99, 95, 85]
    clock.advance(10)
    decision = limiter.peek("k", PER_MINUTE)
    assert decision.remaining == 85
    assert decision.reset_after == 30.0


def test_cost_above_limit_is_never_allowed_and_consumes_nothing() -> None:
    """A cost above the limit is denied with retry_after = inf; the window is untouched."""
    limiter, _ = make_limiter()
    decision = limiter.hit("k", PER_MINUTE, cost=101)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.peek("k", PER_MINUTE).remaining == 100


def test_a_burst_other_than_the_limit_is_rejected() -> None:
    """Windows count limit per period: a different burst names the rate and algorithm."""
    with pytest.raises(ConfigurationError, match=r"100/minute \(burst 20\).*fixed_window"):
        fixed_window.params(Rate.parse("100/minute", burst=20))
    assert fixed_window.params(Rate.parse("100/minute", burst=100)) == (100, 60 * SECOND)


@settings(max_examples=60)
@given(
    first=st.integers(1, 10),
    steps=st.lists(st.tuples(st.integers(0, 4 * SECOND), st.integers(0, 12)), max_size=20),
)
def test_ttl_is_exactly_when_the_state_is_as_if_never_seen(
    first: int, steps: list[tuple[int, int]]
) -> None:
    """At write + ttl a peek equals a fresh key's; one microsecond earlier it does not."""
    p = fixed_window.params(Rate.parse("10/3s"))
    now = 1_700_000_000 * SECOND
    _, state, ttl = fixed_window.check(p, None, now, first)
    written = now
    for dt, cost in steps:
        now += dt
        outcome, new_state, new_ttl = fixed_window.check(p, state, now, cost)
        if outcome.allowed and cost > 0:
            state, ttl, written = new_state, new_ttl, now
    fresh = fixed_window.check(p, None, written + ttl, 0)[0]
    assert fixed_window.check(p, state, written + ttl, 0)[0] == fresh
    assert fixed_window.check(p, state, written + ttl - 1, 0)[0].remaining < 10


# Clock steps are whole multiples of 100 ms, so no key's TTL is under 100 ms:
# Redis expires keys in real time, and a key that lapsed while the simulated
# clock stood still would part the twins. One last probe at any microsecond
# reads that state and writes nothing that is read again.
def test_refill_after_is_the_windows_end_even_on_a_fresh_key() -> None:
    """At 12:00:15, 100/minute: a peek on an unseen key has nothing to reset (reset_after 0),
    yet no more than its 100 can be used until the minute ends, 45 s away; so for hits."""
    limiter, _ = make_limiter(NOON + 15)
    peek = limiter.peek("k", PER_MINUTE)
    assert (peek.remaining, peek.reset_after, peek.refill_after) == (100, 0.0, 45.0)
    assert limiter.hit("k", PER_MINUTE, cost=100).refill_after == 45.0
    denied = limiter.hit("k", PER_MINUTE)
    assert not denied.allowed and denied.retry_after == denied.refill_after == 45.0


COARSE_DT = st.sampled_from(
    [0, 0, 100 * MS, 300 * MS, 900 * MS, SECOND, 1_700 * MS, 6_300 * MS, 59_900 * MS, 61 * SECOND]
)
COSTS = st.sampled_from([0, 1, 1, 1, 2, 3, 7, 11])
STEPS = st.lists(st.tuples(COARSE_DT, COSTS), min_size=1, max_size=40)
PROBE = st.tuples(st.integers(0, 120 * SECOND), COSTS)
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
@given(rates=RATES, steps=STEPS, probe=PROBE)
def test_lua_twin_matches_python_on_redis(
    redis_client: redis.Redis,
    rates: list[Rate],
    steps: list[tuple[int, int]],
    probe: tuple[int, int],
) -> None:
    """The Lua script and the Python reference return identical Decisions on any sequence."""
    redis_client.flushall()
    run = [*steps, probe]
    assert run_lua(redis_client, "fixed_window", "user:1", rates, run) == run_python(
        "fixed_window", "user:1", rates, run
    )


@pytest.mark.redis
@pytest.mark.cluster
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(rates=RATES, steps=STEPS, probe=PROBE, key=st.text(min_size=1, max_size=12))
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster,
    rates: list[Rate],
    steps: list[tuple[int, int]],
    probe: tuple[int, int],
    key: str,
) -> None:
    """Same on a 3-primary Cluster, with arbitrary keys (every layer shares one slot)."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    run = [*steps, probe]
    assert run_lua(cluster_client, "fixed_window", key, rates, run) == run_python(
        "fixed_window", key, rates, run
    )
