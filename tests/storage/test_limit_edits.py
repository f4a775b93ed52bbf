"""A window's count outlives an edit of its limit, alike in every implementation.

A window algorithm's state key names the algorithm and the period, not the limit
(``algorithms.state_suffix``), as envoyproxy/ratelimit's keys do: a rule edited from
100/hour to 50/hour, or a deploy that changes ``Rate(100, minute)``, goes on counting
the same window. A count above the new limit denies (``remaining`` 0, never below) until
the window's end, or for the sliding ones until enough of it has aged out; a raised limit
grants only what the count leaves. The Python reference, the memory store (its C kernel,
its Python path, and again in a child process with ``RATEWARDEN_PURE=1``) and a real
redis-server (the Lua scripts) give the same Decisions on any such history.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.algorithms import WINDOWS, layered
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.storage import _decisions, _plan, memory
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._pure import run_pure
from tests._servers import STORE_TIMEOUT, RedisServer

#: 2024-03-01 12:00:00 UTC: the start of an hour, a minute and a 1.5 s window alike.
NOON_US = 1_709_294_400_000_000
HOUR_US = 3_600_000_000

#: Limits one key is edited between, up and down, on periods with and without an edge
#: inside a history (1.5 s windows pass in a few steps; an hour's never does).
LIMITS = [1, 3, 50, 80, 100, 200]
PERIODS_US = [1_500_000, 60_000_000, HOUR_US]

#: One step: (microseconds the clock moves, index into LIMITS, cost).
step = st.tuples(
    st.sampled_from([0, 0, 1, 7_000, 250_000, 700_000, 1_499_999, 20_000_000]),
    st.integers(0, len(LIMITS) - 1),
    st.sampled_from([0, 1, 1, 2, 5, 30, 60, 150]),
)


class PureStore(MemoryStore):
    """The memory store on its Python path (no kernel)."""

    hit = MemoryStore._hit


def reference(algorithm: str, steps: list[tuple[int, Rate, int]]) -> list[Decision]:
    """The pure algorithm folded over a dict of states, keyed as a store keys them."""
    states: dict[str, Any] = {}
    now, out = NOON_US, []
    for dt, rate, cost in steps:
        now += dt
        plan = _plan.build(algorithm, "rw", "k", rate, cost)
        held = [states.get(key) for key in plan.keys]
        outcomes, writes = layered(plan.algorithm.check, plan.params, held, now, cost)
        if writes is not None:
            for key, (state, _) in zip(plan.keys, writes, strict=True):
                states[key] = state
        out.append(_decisions.to_decision(plan.rates, outcomes, cost))
    return out


def on_store(store: Any, clock: ManualClock, algorithm: str, steps: Any) -> list[Decision]:
    """The same steps through a store's ``hit``, its clock moved as the reference's."""
    out = []
    for dt, rate, cost in steps:
        clock.advance_us(dt)
        out.append(store.hit(algorithm, "k", rate, cost))
    return out


def stores() -> Iterator[tuple[str, Any, ManualClock]]:
    """A fresh memory store (its kernel when built) and one on its Python path, each with
    its clock at noon."""
    for name, kind in (("memory", MemoryStore), ("python path", PureStore)):
        clock = ManualClock(NOON_US / 1_000_000)
        yield name, kind(clock=clock), clock


@settings(max_examples=150, deadline=None)
@given(
    algorithm=st.sampled_from(sorted(WINDOWS)),
    period_us=st.sampled_from(PERIODS_US),
    history=st.lists(step, min_size=1, max_size=25),
)
def test_every_implementation_decides_limit_edits_alike(
    redis_server: RedisServer, algorithm: str, period_us: int, history: list[Any]
) -> None:
    """Any history of costs on one key whose limit is raised and lowered between calls: the
    reference, the memory store's kernel and Python path, and redis-server's script give
    the same Decisions, and no Decision has a negative remaining."""
    period = timedelta(microseconds=period_us)
    steps = [(dt, Rate(LIMITS[at], period), cost) for dt, at, cost in history]
    expected = reference(algorithm, steps)
    assert all(decision.remaining >= 0 for decision in expected)
    for name, store, clock in stores():
        assert on_store(store, clock, algorithm, steps) == expected, name
    client = redis_server.client()
    client.flushall()
    clock = ManualClock(NOON_US / 1_000_000)
    store = RedisStore(client, clock=clock, timeout=STORE_TIMEOUT)
    try:
        assert on_store(store, clock, algorithm, steps) == expected, "redis-server"
    finally:
        store.close()


def all_stores(redis_server: RedisServer) -> Iterator[tuple[str, Any, ManualClock]]:
    """``stores()`` and a RedisStore on the emptied redis-server."""
    yield from stores()
    client = redis_server.client()
    client.flushall()
    clock = ManualClock(NOON_US / 1_000_000)
    store = RedisStore(client, clock=clock, timeout=STORE_TIMEOUT)
    try:
        yield "redis-server", store, clock
    finally:
        store.close()


@pytest.mark.parametrize("algorithm", sorted(WINDOWS))
def test_a_lowered_limit_denies_at_once_with_nothing_remaining(
    redis_server: RedisServer, algorithm: str
) -> None:
    """80 hits at 100/hour, then the limit is 50/hour: denied with remaining 0 (not -30),
    until the window's end (fixed_window) or until enough has aged out (sliding ones);
    a microsecond before the retry time still denied, at it allowed."""
    for name, store, clock in all_stores(redis_server):
        assert store.hit(algorithm, "k", Rate.parse("100/hour"), 80).allowed, name
        clock.advance_us(1_000_000)
        lowered = Rate.parse("50/hour")
        denied = store.hit(algorithm, "k", lowered)
        assert (denied.allowed, denied.remaining, denied.limit) == (False, 0, 50), name
        assert not store.hit(algorithm, "k", lowered, 0).allowed, name  # a check too
        if algorithm == "fixed_window":
            assert denied.retry_after == (HOUR_US - 1_000_000) / 1_000_000, name
        wait_us = round(denied.retry_after * 1_000_000)
        clock.advance_us(wait_us - 1)
        assert not store.hit(algorithm, "k", lowered).allowed, name
        clock.advance_us(1)
        assert store.hit(algorithm, "k", lowered).allowed, name


@pytest.mark.parametrize("algorithm", sorted(WINDOWS))
def test_a_raised_limit_grants_only_what_the_count_leaves(
    redis_server: RedisServer, algorithm: str
) -> None:
    """80 hits at 100/hour, then 200/hour: 120 more in the window, not 200."""
    for name, store, _ in all_stores(redis_server):
        assert store.hit(algorithm, "k", Rate.parse("100/hour"), 80).allowed, name
        raised = Rate.parse("200/hour")
        assert store.hit(algorithm, "k", raised, 0).remaining == 120, name
        assert store.hit(algorithm, "k", raised, 120).allowed, name
        over = store.hit(algorithm, "k", raised)
        assert (over.allowed, over.remaining) == (False, 0), name
        # Back to 100: the 200 counted keep it denied, with nothing remaining.
        assert store.hit(algorithm, "k", Rate.parse("100/hour"), 0).remaining == 0, name


def test_a_bucket_starts_afresh_when_its_rate_changes() -> None:
    """A bucket's state means something only at its rate, so its key names the whole rate:
    gcra at 100/hour, emptied, then 50/hour is a new, full bucket."""
    store = MemoryStore(clock=ManualClock(NOON_US / 1_000_000))
    assert store.hit("gcra", "k", Rate.parse("100/hour"), 100).allowed
    assert store.hit("gcra", "k", Rate.parse("50/hour"), 50).allowed


@pytest.mark.parametrize("algorithm", sorted(WINDOWS))
def test_two_limits_of_one_window_in_one_call_are_refused(algorithm: str) -> None:
    """Two rates of one period would count one window: the smaller limit decides alone, so a
    call naming both is refused, before anything is counted."""
    store = MemoryStore(clock=ManualClock(NOON_US / 1_000_000))
    rates = [Rate.parse("100/hour"), Rate.parse("50/60m"), Rate.parse("5/second")]
    with pytest.raises(
        ConfigurationError, match=r"smaller limit \(50/hour\) decides alone; keep one"
    ):
        store.hit(algorithm, "k", rates)
    assert store.hit(algorithm, "k", rates[0], 0).remaining == 100


@pytest.mark.skipif(not memory.SPEEDUPS, reason="no kernel here: this run is the pure one")
def test_the_same_holds_with_ratewarden_pure() -> None:
    """This file again in a child process with RATEWARDEN_PURE=1 (no kernel anywhere)."""
    run_pure(__file__, timeout=600)
