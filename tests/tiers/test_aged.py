"""``_aged``: a held decision as seen later (the whole cost of a lease hit), vs its definition."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import MemoryStore, Rate
from ratewarden.decision import Decision
from ratewarden.limiter._aged import aged as _aged
from ratewarden.testing import ManualClock

RATES = [
    (Rate.parse("5/second"),),
    (Rate.parse("3/second", burst=6),),
    (Rate.parse("2/second"), Rate.parse("7/minute")),
]


def _reference(d: Decision, elapsed_us: int, cost: int, extra: int) -> Decision:
    """Every field by its definition: times shifted by ``elapsed_us``, never below 0."""

    def shifted(seconds: float) -> float:
        if math.isinf(seconds):
            return seconds
        return max(0, round(seconds * 1_000_000) - elapsed_us) / 1_000_000

    def one(x: Decision, layers: tuple[Decision, ...]) -> Decision:
        return Decision(
            x.allowed,
            x.limit,
            x.remaining + extra,
            shifted(x.reset_after),
            shifted(x.retry_after),
            x.delay,
            x.rate,
            cost,
            False,
            layers,
            refill_after=shifted(x.refill_after),
        )

    return one(d, tuple(one(layer, ()) for layer in d.layers))


@settings(max_examples=200, deadline=None)
@given(
    which=st.integers(0, len(RATES) - 1),
    algorithm=st.sampled_from(["gcra", "token_bucket", "sliding_window"]),
    hits=st.integers(1, 12),
    elapsed_us=st.integers(0, 3_000_000),
    cost=st.integers(1, 3),
    extra=st.integers(0, 9),
)
def test_aged_matches_its_definition(
    which: int, algorithm: str, hits: int, elapsed_us: int, cost: int, extra: int
) -> None:
    """Allowed and denied decisions, one rate or two, every algorithm that leases use."""
    store = MemoryStore(clock=ManualClock())
    rates = RATES[which]
    if algorithm == "sliding_window" and rates[0].burst is not None:
        rates = (Rate.parse("3/second"),)
    decision = None
    for _ in range(hits):
        decision = store.hit(algorithm, "k", rates, 1)
    assert decision is not None
    assert _aged(decision, elapsed_us, cost, extra) == _reference(decision, elapsed_us, cost, extra)
