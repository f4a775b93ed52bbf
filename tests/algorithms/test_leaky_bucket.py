"""Leaky bucket: the shaper's delays, and the policer's verdicts equal the token bucket's.

What the leaky bucket shares with the other buckets (the policer's burst and denials,
the window bound, exactness, expiry and its Lua twin) is in ``test_properties.py``.
"""

from __future__ import annotations

from functools import partial

from hypothesis import given, settings

from ratewarden import Rate
from ratewarden.algorithms import leaky_bucket
from tests._differential import run_python
from tests.algorithms._limiter import SECOND, limiter_at
from tests.algorithms._runs import BUCKET_RATES, BUCKET_STEPS, Rates, Steps

BUCKET = Rate.parse("100/minute", burst=20)  # holds 20, drains one every 0.6 s
INTERVAL_US = 600_000

make_limiter = partial(limiter_at, "leaky_bucket")


def test_shaper_delay_grows_by_one_interval_per_queued_request() -> None:
    """Requests arriving together are queued 0, 0.6, 1.2, ... s apart; the 21st does not fit.
    Once one interval has drained, the one more that fits is queued behind the other 19."""
    limiter, clock = make_limiter()
    decisions = [limiter.hit("k", BUCKET) for _ in range(21)]
    assert all(d.allowed for d in decisions[:20])
    assert [d.delay for d in decisions[:20]] == [k * INTERVAL_US / SECOND for k in range(20)]
    assert [d.remaining for d in decisions[:3]] == [19, 18, 17]
    denied = decisions[20]
    assert not denied.allowed
    assert denied.delay == 0.0
    assert denied.retry_after == 0.6
    assert denied.reset_after == 12.0
    clock.advance_us(INTERVAL_US)
    assert limiter.hit("k", BUCKET).delay == 19 * INTERVAL_US / SECOND


def test_acquire_releases_callers_one_interval_apart() -> None:
    """Limiter.acquire waits out each delay, so a burst of callers leaves at a steady 0.6 s pace."""
    limiter, clock = make_limiter()
    start = clock.now_us()
    departures = []
    for _ in range(5):
        assert limiter.acquire("k", BUCKET).allowed
        departures.append(clock.now_us() - start)
    assert departures == [k * INTERVAL_US for k in range(5)]


def test_delay_shrinks_as_the_bucket_drains_while_idle() -> None:
    """20 queued, 3 s later 5 have leaked out: the next waits behind the other 15, 9 s; after
    an hour the bucket is empty again and nothing waits."""
    limiter, clock = make_limiter()
    for _ in range(20):
        limiter.hit("k", BUCKET)
    clock.advance(3.0)
    assert limiter.hit("k", BUCKET).delay == 9.0
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


def test_the_shaper_delay_is_the_queue_apart_from_refill_after() -> None:
    """The delay is the wait behind the queue; refill_after, the time until room for one more
    has drained. One request in, 0.25 s later 19 more are delayed 0.35 s, as long as room
    takes; 0.35 s later the next waits 11.4 s behind those 19, yet room is 0.6 s away."""
    limiter, clock = make_limiter()
    limiter.hit("k", BUCKET)
    clock.advance(0.25)
    queued = limiter.hit("k", BUCKET, cost=19)
    assert queued.refill_after == 0.35 and queued.delay == 0.35
    clock.advance(0.35)
    refilled = limiter.hit("k", BUCKET)
    assert refilled.refill_after == 0.6 and refilled.delay == 11.4


@settings(max_examples=60, deadline=None)
@given(rates=BUCKET_RATES, steps=BUCKET_STEPS)
def test_policer_admits_exactly_what_the_token_bucket_admits(rates: Rates, steps: Steps) -> None:
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
