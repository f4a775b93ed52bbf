"""The middleware's precomputed header plan renders exactly what ``ratewarden.headers`` renders."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.decision import Decision
from ratewarden.headers import HeaderOptions, rate_limit_headers
from ratewarden.middleware._render import HeaderPlan
from ratewarden.testing import ManualClock

NOW = 1_700_000_000.0

rates_strategy = st.lists(
    st.builds(
        Rate,
        st.integers(1, 50),
        st.sampled_from([0.25, 1, 2.5, 60, 3600]),
        st.one_of(st.none(), st.integers(1, 60)),
    ),
    min_size=1,
    max_size=3,
    unique=True,
)
options_strategy = st.builds(
    HeaderOptions,
    draft=st.sampled_from(["draft-11", "draft-10", None]),
    legacy=st.booleans(),
    reset=st.sampled_from(["delta", "epoch"]),
    all_policies=st.booleans(),
    partition_key=st.booleans(),
).map(lambda o: dataclasses.replace(o, github=o.legacy))
steps = st.lists(st.tuples(st.integers(0, 8), st.floats(0, 5)), min_size=1, max_size=25)


def _decisions(rates: list[Rate], plan: list[tuple[int, float]]) -> list[Decision]:
    clock = ManualClock(NOW)
    limiter = Limiter(MemoryStore(clock=clock))
    rules = tuple(rates)
    found = []
    for cost, wait in plan:
        found.append(limiter.hit("k", rules, cost))
        clock.advance(wait)
    return found


@settings(max_examples=150, deadline=None)
@given(
    rates=rates_strategy, options=options_strategy, plan=steps, name=st.sampled_from(["c", "a.b"])
)
def test_the_plan_renders_what_headers_renders(
    rates: list[Rate], options: HeaderOptions, plan: list[tuple[int, float]], name: str
) -> None:
    """Over real decisions (allowed, denied, several layers) and every option, header for header."""
    header_plan = HeaderPlan(name, tuple(rates), options)
    partition = b"0123456789ab" if options.partition_key else None
    for decision in _decisions(rates, plan):
        expected = rate_limit_headers(name, decision, options, now=NOW, partition=partition)
        assert header_plan.render(decision, NOW, partition) == expected


def test_a_decision_from_other_rates_is_rendered_by_headers_itself() -> None:
    """A decision whose layers are not the rule's rates (a failure mode's) is still right."""
    options = HeaderOptions(legacy=True)
    plan = HeaderPlan("c", (Rate(10, 60),), options)
    degraded = Decision(False, 0, 0, 0.0, 1.0, degraded="closed")
    assert plan.render(degraded, NOW, None) == rate_limit_headers("c", degraded, options, now=NOW)
    other = _decisions([Rate(5, 1), Rate(100, 60)], [(1, 0.0)])[0]
    assert plan.render(other, NOW, None) == rate_limit_headers("c", other, options, now=NOW)
