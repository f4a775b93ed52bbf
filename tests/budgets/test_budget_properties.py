"""Reserve/settle never admits more actual usage than the budget allows, whatever the order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import MemoryStore
from ratewarden.budgets import TokenBudget
from ratewarden.testing import ManualClock

RATE_PER_US = 1000 / 60_000_000  # 1,000 tokens a minute, burst 1,000

Op = tuple[str, int, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.integers(0, 400), st.sampled_from([0, 0, 150, 600])),
        st.tuples(st.just("settle"), st.integers(0, 50), st.just(0)),
        st.tuples(
            st.just("wait"),
            st.sampled_from([1, 6_000, 2_000_000, 15_000_000, 40_000_000]),
            st.just(0),
        ),
    ),
    max_size=60,
)


def _worst_excess(events: list[tuple[int, int]]) -> float:
    """Largest (admitted - (1000 + rate * span)) over every run of consecutive admissions."""
    worst = float("-inf")
    for i, (start, _) in enumerate(events):
        total = 0
        for at, used in events[i:]:
            total += used
            worst = max(worst, total - (1000 + (at - start) * RATE_PER_US))
    return worst


@settings(max_examples=300, deadline=None)
@given(ops)
def test_actual_usage_in_any_interval_fits_burst_plus_rate(sequence: list[Op]) -> None:
    """Counting each request's actual usage when it was admitted, no interval exceeds C + r*t."""
    clock = ManualClock()
    budget = TokenBudget(MemoryStore(clock=clock), {"tokens": "1000/minute"}, max_output_tokens=600)
    open_ = []
    events: list[tuple[int, int]] = []
    for kind, a, b in sequence:
        if kind == "reserve":
            reservation = budget.reserve("k", input_tokens=a)
            if reservation:
                used_output = min(b, 600)
                open_.append((reservation, used_output))
                events.append((clock.now_us(), a + used_output))
        elif kind == "settle" and open_:
            reservation, used_output = open_.pop(a % len(open_))
            budget.settle(reservation, output_tokens=used_output)
        elif kind == "wait":
            clock.advance_us(a)
    assert _worst_excess(events) <= 1e-6


def test_a_rest_between_reserve_and_settle_absorbs_the_excess() -> None:
    """Two open reservations, one settled, a rest, a new charge: the other refunds nothing."""
    clock = ManualClock()
    budget = TokenBudget(MemoryStore(clock=clock), {"tokens": "1000/minute"}, max_output_tokens=0)
    first = budget.reserve("k", input_tokens=500)
    second = budget.reserve("k", input_tokens=500)
    assert budget.settle(first, input_tokens=0, output_tokens=0).refunded["tokens"] == 500
    clock.advance(40)  # the axis rested at 30 s: the second's excess was given back by time
    budget.reserve("k", input_tokens=500)
    assert budget.settle(second, input_tokens=0, output_tokens=0).refunded["tokens"] == 0
    assert budget.peek("k").axis("tokens").remaining == 500


def test_a_ledger_that_rested_while_the_axis_held_the_excess_refunds_only_what_is_ahead() -> None:
    """The case hypothesis found: 667 reserved at 0 s (67 used), 40 s later 600 more reserved,
    the first settled. An exact ledger of actual usage rested before 40 s (67 tokens come back
    in 4 s), so only what the axis still held beyond the ledger may come back: a third 600 at
    40 s must be refused (the ledger has 400 left), where the full 600 used to be refunded."""
    clock = ManualClock()
    budget = TokenBudget(MemoryStore(clock=clock), {"tokens": "1000/minute"}, max_output_tokens=600)
    first = budget.reserve("k", input_tokens=67)
    assert first
    clock.advance(40)
    assert budget.reserve("k", input_tokens=0)
    refund = budget.settle(first, output_tokens=0).refunded["tokens"]
    assert refund <= 1  # 0.02 s of the first reservation was still ahead of the ledger
    assert not budget.reserve("k", input_tokens=0)
    assert budget.peek("k").axis("tokens").remaining <= 401
