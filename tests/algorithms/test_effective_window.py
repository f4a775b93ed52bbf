"""``refill_after``, the effective window, against its definition on every algorithm.

The IETF RateLimit field's ``t`` (draft-11) is the time within which the client
can use no more than ``r``. So, by definition: if the client used all of
``remaining`` now, one more unit is refused until exactly ``refill_after`` has
passed, and admitted then. These tests check that on the memory store with a
manual clock, after arbitrary histories, for every rate algorithm and for
concurrency slots; the per-algorithm tests hold the hand-worked examples.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.decision import Decision
from ratewarden.testing import ManualClock

#: Rates whose emission interval is fractional (3/second, 7/1500ms) or whole, with and
#: without a separate burst (the window algorithms take none).
RATES = [
    Rate.parse("3/second"),
    Rate.parse("5/minute"),
    Rate.parse("7/1500ms"),
    Rate.parse("100/minute", burst=20),
    Rate.parse("2/second", burst=5),
]

HISTORY = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 1, 999, 50_000, 333_333, 700_000, 1_000_000, 13_000_000]),
        st.sampled_from([0, 1, 1, 1, 2, 3, 6, 30]),  # 0 peeks; the large ones may not fit
    ),
    max_size=25,
)


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _windowless(algorithm: str, rate: Rate) -> Rate:
    """The window algorithms take no separate burst: the same rate without it."""
    if algorithm in ("fixed_window", "sliding_window", "sliding_log") and rate.burst is not None:
        return Rate(rate.limit, rate.period)
    return rate


def replay(
    algorithm: str, which: int, history: list[tuple[int, int]]
) -> tuple[MemoryStore, ManualClock, Rate]:
    """A memory store after ``history`` (clock steps and costs) on key "k" at ``RATES[which]``."""
    rate = _windowless(algorithm, RATES[which])
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for step_us, cost in history:
        clock.advance_us(step_us)
        store.hit(algorithm, "k", rate, cost)
    return store, clock, rate


def check_definition(
    decision: Decision, use: Callable[[int], Decision], advance_us: Callable[[int], None]
) -> None:
    """Use ``remaining`` now, then one unit is refused 1 us before ``refill_after`` and
    admitted at it (``use(cost)`` decides now; ``advance_us`` moves the clock)."""
    window_us = _us(decision.refill_after)
    assert window_us >= 1
    remaining = max(decision.remaining, 0)
    if remaining > 0:
        assert use(remaining).allowed
    advance_us(window_us - 1)
    assert not use(1).allowed
    advance_us(1)
    assert use(1).allowed


@settings(max_examples=300, deadline=None)
@given(
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    which=st.integers(0, len(RATES) - 1),
    history=HISTORY,
)
def test_one_more_unit_is_refused_before_t_and_admitted_at_t(
    algorithm: str, which: int, history: list[tuple[int, int]]
) -> None:
    """Every algorithm, after any history of hits and peeks: the decision's own definition."""
    store, clock, rate = replay(algorithm, which, history)
    check_definition(
        store.hit(algorithm, "k", rate, 0),
        use=lambda units: store.hit(algorithm, "k", rate, units),
        advance_us=clock.advance_us,
    )


@settings(max_examples=300, deadline=None)
@given(
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    which=st.integers(0, len(RATES) - 1),
    history=HISTORY,
    cost=st.sampled_from([0, 1, 2, 5]),
)
def test_every_decision_carries_the_window_of_the_state_it_leaves(
    algorithm: str, which: int, history: list[tuple[int, int]], cost: int
) -> None:
    """The window a hit reports (allowed or denied, any cost) is the one a peek then reports."""
    store, clock, rate = replay(algorithm, which, history)
    decision = store.hit(algorithm, "k", rate, cost)
    peek = store.hit(algorithm, "k", rate, 0)
    assert (decision.refill_after, decision.remaining) == (peek.refill_after, peek.remaining)
    check_definition(
        decision,
        use=lambda units: store.hit(algorithm, "k", rate, units),
        advance_us=clock.advance_us,
    )


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 4),
    leases=st.lists(
        st.tuples(
            st.integers(0, 3_000_000),  # microseconds before this acquire
            st.integers(1, 3),  # slots
            st.integers(1, 5_000_000),  # ttl_us
        ),
        max_size=6,
    ),
    ttl_us=st.integers(1, 5_000_000),
    slots=st.integers(1, 4),
)
def test_a_slot_frees_exactly_when_the_window_says(
    limit: int, leases: list[tuple[int, int, int]], ttl_us: int, slots: int
) -> None:
    """Concurrency: take the remaining slots now under leases of the acquire's TTL; with no
    release, one more slot is refused until refill_after and granted at it. The acquire asks
    for ``slots``: denied for want of room, it holds no lease of its TTL itself."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for i, (step_us, held, lease_ttl) in enumerate(leases):
        clock.advance_us(step_us)
        store.acquire_slot("k", limit, f"held-{i}", held, lease_ttl)
    decision = store.acquire_slot("k", limit, "mine", slots, ttl_us)
    fresh = iter(range(1_000))
    check_definition(
        decision,
        use=lambda units: store.acquire_slot("k", limit, f"new-{next(fresh)}", units, ttl_us),
        advance_us=clock.advance_us,
    )
