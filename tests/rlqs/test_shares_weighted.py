"""The weighted split (a rule with ``rlqs_weights``): weighted max-min fair, in whole tokens.

An Envoy asking less than its weight's part of what is left gets what it asks; the rest
goes to the others in proportion to their weights; Envoys that all ask for more than they
can get hold shares in proportion to their weights. The sums are those of the split by
demand, so the bound of docs/rlqs.md holds unchanged. A rule without weights keeps the
split by demand, number for number.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratewarden.server.rlqs.shares import Budget, Share, apportion, by_weight, split

demands = st.lists(
    st.fractions(min_value=0, max_value=10_000, max_denominator=1000), min_size=1, max_size=12
)


@st.composite
def asked_and_weights(draw: st.DrawFn) -> tuple[list[Fraction], list[int]]:
    asked = draw(demands)
    weights = draw(st.lists(st.integers(1, 1000), min_size=len(asked), max_size=len(asked)))
    return asked, weights


def tokens(shares: list[Share]) -> list[int]:
    return [share.tokens_per_fill for share in shares]


def test_saturated_envoys_split_the_limit_by_weight() -> None:
    """60 a minute, weights 3 and 1, both asking 100: 45 and 15 (by demand: 30 and 30)."""
    budget = Budget(60, 60, 8)
    assert tokens(split(budget, [Fraction(100), Fraction(100)], [3, 1])) == [45, 15]
    assert [s.max_tokens for s in split(budget, [Fraction(100), Fraction(100)], [3, 1])] == [6, 2]
    assert tokens(split(budget, [Fraction(100), Fraction(100)])) == [30, 30]


def test_an_envoy_asking_less_than_its_weighted_part_gets_it_and_the_rest_goes_to_the_others() -> (
    None
):
    """Weights 3 and 1: the heavy one asking 10 gets 10, the light one the other 50; the light
    one asking 10 gets 10, the heavy one 50."""
    budget = Budget(60, 60, 60)
    assert tokens(split(budget, [Fraction(10), Fraction(100)], [3, 1])) == [10, 50]
    assert tokens(split(budget, [Fraction(100), Fraction(10)], [3, 1])) == [50, 10]


def test_under_the_limit_each_gets_its_demand_and_the_spare_goes_by_weight() -> None:
    """60 a minute, demands 10 and 10, weights 3 and 1: a spare of 40 split 30 and 10."""
    assert tokens(split(Budget(60, 60, 4), [Fraction(10), Fraction(10)], [3, 1])) == [40, 20]


def test_nobody_asking_splits_by_weight() -> None:
    """A new bucket's first round: the weights alone."""
    assert tokens(split(Budget(8, 60, 8), [Fraction(0)] * 2, [3, 1])) == [6, 2]


def test_a_weight_below_one_or_a_missing_one_is_refused() -> None:
    with pytest.raises(ValueError, match="one positive weight per demand"):
        by_weight(Budget(1, 1, 1), [Fraction(1)], [0])
    with pytest.raises(ValueError, match="one positive weight per demand"):
        by_weight(Budget(1, 1, 1), [Fraction(1), Fraction(1)], [1])


@given(
    limit=st.integers(0, 5000),
    fill_s=st.integers(1, 3600),
    burst=st.integers(0, 5000),
    drawn=asked_and_weights(),
)
def test_the_weighted_shares_of_a_round_never_add_up_to_more_than_the_budget(
    limit: int, fill_s: int, burst: int, drawn: tuple[list[Fraction], list[int]]
) -> None:
    """The sums the bound rests on: tokens per fill add up to exactly the limit, capacity to
    at most max(burst, holders), every holder has one token of capacity."""
    asked, weights = drawn
    got = split(Budget(limit, fill_s, burst), asked, weights)
    assert sum(tokens(got)) == limit
    holders = [share for share in got if not share.empty]
    assert sum(share.max_tokens for share in got) <= max(burst, len(holders))
    assert all(share.max_tokens >= 1 for share in holders)
    assert all(share == Share(0, 0) for share in got if share.empty)


@given(limit=st.integers(1, 5000), drawn=asked_and_weights())
def test_the_weighted_split_is_max_min_fair_and_work_conserving(
    limit: int, drawn: tuple[list[Fraction], list[int]]
) -> None:
    """Exact parts: they add up to the limit; under contention nobody gets more than it asked
    (so an Envoy asking nothing gets nothing), and an Envoy that gets less than it asked has
    the highest part per weight of all: no one could give it more without taking from one
    that holds less per weight. The whole tokens are those parts rounded down or up."""
    asked, weights = drawn
    budget = Budget(limit, 60, limit)
    parts = by_weight(budget, asked, weights)
    assert sum(parts) == limit or sum(asked) == 0
    if sum(asked) > limit:
        assert all(part <= demand for part, demand in zip(parts, asked, strict=True))
        most = max(part / weight for part, weight in zip(parts, weights, strict=True))
        for part, demand, weight in zip(parts, asked, weights, strict=True):
            assert part == demand or part / weight == most
    whole = tokens(split(budget, asked, weights))
    if sum(asked) > 0:
        assert all(abs(t - part) < 1 for t, part in zip(whole, parts, strict=True))


@given(limit=st.integers(1, 5000), weights=st.lists(st.integers(1, 1000), min_size=1, max_size=12))
def test_when_every_envoy_asks_for_the_whole_limit_the_shares_follow_the_weights(
    limit: int, weights: list[int]
) -> None:
    """All saturated: the parts are the limit in proportion to the weights, and so are the
    whole tokens (largest remainder of those parts)."""
    asked = [Fraction(limit)] * len(weights)
    budget = Budget(limit, 60, limit)
    assert by_weight(budget, asked, weights) == [
        Fraction(limit * weight, sum(weights)) for weight in weights
    ]
    assert tokens(split(budget, asked, weights)) == apportion(limit, [Fraction(w) for w in weights])


@given(limit=st.integers(0, 5000), burst=st.integers(0, 5000), asked=demands)
def test_with_equal_weights_under_the_limit_the_split_is_the_split_by_demand(
    limit: int, burst: int, asked: list[Fraction]
) -> None:
    """Equal weights, the Envoys asking no more than the limit together (or nothing): the same
    shares, number for number, as a rule without weights."""
    budget = Budget(limit, 60, burst)
    if sum(asked) <= limit:
        assert split(budget, asked, [7] * len(asked)) == split(budget, asked)


@given(limit=st.integers(1, 5000), asked=demands)
def test_with_equal_weights_over_the_limit_every_envoy_gets_the_same_or_what_it_asked(
    limit: int, asked: list[Fraction]
) -> None:
    """Equal weights under contention: max-min fair, one level for all that ask more (where
    the split by demand gives in proportion to demand: the one difference, docs/rlqs.md)."""
    if sum(asked) > limit:
        parts = by_weight(Budget(limit, 60, limit), asked, [1] * len(asked))
        level = max(parts)
        assert all(part == min(demand, level) for part, demand in zip(parts, asked, strict=True))


@given(limit=st.integers(0, 5000), burst=st.integers(0, 5000), asked=demands)
def test_a_rule_without_weights_keeps_the_split_by_demand(
    limit: int, burst: int, asked: list[Fraction]
) -> None:
    """No weights: each Envoy's part is its demand plus an even part of the spare under the
    limit, its demand over it, equal when nobody asks; rounded by largest remainder (today's
    split, restated here so that it cannot drift)."""
    total = sum(asked, Fraction(0))
    if total == 0:
        parts = [Fraction(1)] * len(asked)
    elif total <= limit:
        parts = [demand + (limit - total) / len(asked) for demand in asked]
    else:
        parts = list(asked)
    assert tokens(split(Budget(limit, 60, burst), asked)) == apportion(limit, parts)
