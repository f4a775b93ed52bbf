"""A several-rate Decision keeps the page's definitions (algorithms.md, Decision).

``remaining`` is the least any layer has left (a call of that cost is admitted now, one
more unit is not), and ``refill_after`` is the longest effective window of the layers
with that least room: if the client used all of ``remaining`` now, one more unit is
refused until ``refill_after`` has passed and admitted then, allowed or denied. A denial
waits for nothing else: its ``delay`` is 0, as one rate's is. ``limit``, ``rate`` and
``retry_after`` stay the binding layer's (a denial's: the denied layer that waits
longest), and ``layers`` each layer's own. On the memory store (with the C kernel, and
again without it) and on a redis-server, each with a manual clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS, WINDOWS
from ratewarden.decision import Decision
from ratewarden.storage import memory
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._pure import run_pure
from tests._servers import STORE_TIMEOUT
from tests.algorithms._limiter import NOON

Make = Callable[[str], tuple[Limiter, ManualClock]]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    """``make(algorithm)``: a limiter on a fresh key space and its clock, set to a minute's
    start (12:00:00 UTC), on the memory store or on a redis-server."""

    def on_memory(algorithm: str) -> tuple[Limiter, ManualClock]:
        clock = ManualClock(NOON)
        return Limiter(MemoryStore(clock=clock), algorithm=algorithm), clock

    def on_redis(algorithm: str) -> tuple[Limiter, ManualClock]:
        client: redis.Redis = request.getfixturevalue("redis_client")
        client.flushall()
        clock = ManualClock(NOON)
        store = RedisStore(client, clock=clock, timeout=STORE_TIMEOUT)
        return Limiter(store, algorithm=algorithm), clock

    yield on_memory if request.param == "memory" else on_redis


def holds_the_window(
    decision: Decision, use: Callable[[int], Decision], clock: ManualClock
) -> None:
    """Use all of ``remaining`` now: admitted; one unit more is refused 1 us before
    ``refill_after`` and admitted at it."""
    window_us = round(decision.refill_after * 1_000_000)
    assert window_us >= 1
    if decision.remaining > 0:
        assert use(decision.remaining).allowed
    clock.advance_us(window_us - 1)
    assert not use(1).allowed
    clock.advance_us(1)
    assert use(1).allowed


@pytest.mark.parametrize(
    ("algorithm", "window"),
    [("gcra", 20.0), ("token_bucket", 20.0), ("sliding_log", 60.0), ("fixed_window", 60.0)],
)
def test_an_allowed_call_tied_on_remaining_reports_the_longer_window(
    make: Make, algorithm: str, window: float
) -> None:
    """3/second and 3/minute, one hit: both layers have 2 left; the minute's window (when
    its next unit is back) is the one that holds, not the second's 1/3 s or 1 s."""
    limiter, clock = make(algorithm)
    rates = [Rate.parse("3/second"), Rate.parse("3/minute")]
    decision = limiter.hit("k", rates)
    assert decision.allowed
    assert [layer.remaining for layer in decision.layers] == [2, 2]
    assert (decision.remaining, decision.refill_after) == (2, window)
    assert decision.layers[1].refill_after == window
    assert (decision.limit, decision.rate) == (3, rates[1])
    holds_the_window(decision, lambda cost: limiter.hit("k", rates, cost), clock)


def test_a_call_that_takes_every_layer_to_zero_reports_the_longest_window(make: Make) -> None:
    """GCRA, 10/second and 10/minute, cost 10: both empty; the next unit is 6 s away (the
    minute's), not 0.1 s (at 0.1 s a hit was denied with retry_after 5.9)."""
    limiter, clock = make("gcra")
    rates = [Rate.parse("10/second"), Rate.parse("10/minute")]
    decision = limiter.hit("k", rates, 10)
    assert [(layer.remaining, layer.refill_after) for layer in decision.layers] == [
        (0, 0.1),
        (0, 6.0),
    ]
    assert (decision.allowed, decision.remaining, decision.refill_after) == (True, 0, 6.0)
    holds_the_window(decision, lambda cost: limiter.hit("k", rates, cost), clock)


def test_a_denial_reports_the_least_remaining_of_every_layer(make: Make) -> None:
    """GCRA, 5/minute and 3/second, cost 3 twice: the minute layer waits longest (12 s) and
    has 2 left, but the second's has none: a hit of 1 now is denied, so remaining is 0,
    and its window is the second's (one unit back in 1/3 s). limit, rate and retry_after
    stay the minute's; the layers are each their own."""
    limiter, clock = make("gcra")
    rates = [Rate.parse("5/minute"), Rate.parse("3/second")]
    assert limiter.hit("k", rates, 3).allowed
    denied = limiter.hit("k", rates, 3)
    assert not denied.allowed
    assert [(x.allowed, x.remaining, x.retry_after) for x in denied.layers] == [
        (False, 2, 12.0),
        (False, 0, 1.0),
    ]
    assert (denied.limit, denied.rate, denied.retry_after) == (5, rates[0], 12.0)
    assert (denied.remaining, denied.refill_after) == (0, 0.333334)
    holds_the_window(denied, lambda cost: limiter.hit("k", rates, cost), clock)


def test_a_denied_shaper_call_has_no_delay(make: Make) -> None:
    """Leaky bucket, 1/second and 10/minute, two hits: the second is denied by the second's
    layer; the minute's layer (re-checked at cost 0) would delay 6 s, but a denial
    proceeds at no time: delay 0, as one rate's denial. The layers keep their own."""
    limiter, _ = make("leaky_bucket")
    rates = [Rate.parse("1/second"), Rate.parse("10/minute")]
    assert limiter.hit("k", rates).allowed
    denied = limiter.hit("k", rates)
    assert not denied.allowed
    assert [(layer.allowed, layer.delay) for layer in denied.layers] == [(False, 0.0), (True, 6.0)]
    assert denied.delay == 0.0
    assert limiter.hit("one", rates[0]).allowed
    assert limiter.hit("one", rates[0]).delay == 0.0  # one rate's denial


#: Fractional and whole emission intervals, short and long periods, no separate burst (the
#: window algorithms take none).
RATES = [
    Rate.parse("3/second"),
    Rate.parse("5/minute"),
    Rate.parse("7/1500ms"),
    Rate.parse("10/minute"),
    Rate.parse("2/second"),
    Rate.parse("4/2s"),
]


@settings(max_examples=250, deadline=None)
@given(
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    rates=st.lists(st.sampled_from(RATES), min_size=2, max_size=3, unique=True),
    history=st.lists(
        st.tuples(
            st.sampled_from([0, 0, 1, 50_000, 333_333, 700_000, 1_000_000, 13_000_000]),
            st.sampled_from([0, 1, 1, 2, 3, 6]),
        ),
        max_size=20,
    ),
    cost=st.sampled_from([0, 1, 2, 3, 5]),
)
def test_every_layered_decision_holds_the_definition_on_memory(
    algorithm: str, rates: list[Rate], history: list[tuple[int, int]], cost: int
) -> None:
    """Any rate algorithm, two or three layers, any history: the decision of a hit (allowed
    or denied) keeps the definition, has remaining and refill_after as its layers give
    them, and a denial's delay is 0. (A window algorithm's rates have distinct periods:
    two limits of one period would count one window, and a call refuses them.)"""
    assume(algorithm not in WINDOWS or len({rate.period_us for rate in rates}) == len(rates))
    clock = ManualClock(NOON)
    store = MemoryStore(clock=clock)
    for step_us, units in history:
        clock.advance_us(step_us)
        store.hit(algorithm, "k", rates, units)
    decision = store.hit(algorithm, "k", rates, cost)
    least = min(layer.remaining for layer in decision.layers)
    assert decision.remaining == least
    assert decision.refill_after == max(
        layer.refill_after for layer in decision.layers if layer.remaining == least
    )
    if not decision.allowed:
        assert decision.delay == 0.0
    holds_the_window(decision, lambda units: store.hit(algorithm, "k", rates, units), clock)


@pytest.mark.skipif(not memory.SPEEDUPS, reason="no kernel here: this run is the pure one")
def test_the_same_holds_without_the_kernel() -> None:
    """This file's memory tests again, in a child process with RATEWARDEN_PURE=1."""
    run_pure(__file__, "-k", "memory", timeout=300)
