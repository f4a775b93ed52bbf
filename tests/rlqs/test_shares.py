"""The share arithmetic: a rule's limit split between Envoys in whole tokens that add up."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from ratewarden.server.rlqs.shares import Budget, Share, apportion, by_demand, split


def test_apportion_splits_whole_units_by_largest_remainder_ties_to_the_earlier() -> None:
    assert apportion(10, [Fraction(1), Fraction(1), Fraction(1)]) == [4, 3, 3]
    assert apportion(7, [Fraction(5), Fraction(2)]) == [5, 2]
    assert apportion(5, [Fraction(0), Fraction(0)]) == [0, 0]
    assert apportion(0, [Fraction(3)]) == [0]


def test_under_the_limit_each_envoy_gets_its_demand_and_an_even_part_of_the_spare() -> None:
    """60 a minute, demands 10 and 20: spare 30, so 25 and 35."""
    budget = Budget(60, 60, 10)
    assert by_demand(budget, [Fraction(10), Fraction(20)]) == [25, 35]
    assert [s.tokens_per_fill for s in split(budget, [Fraction(10), Fraction(20)])] == [25, 35]


def test_over_the_limit_shares_follow_demand_and_an_idle_envoy_gets_nothing() -> None:
    budget = Budget(60, 60, 10)
    got = split(budget, [Fraction(300), Fraction(0), Fraction(100)])
    assert [s.tokens_per_fill for s in got] == [45, 0, 15]
    assert got[1] == Share(0, 0) and got[1].empty
    assert sum(s.max_tokens for s in got) == 10


def test_nobody_asking_splits_evenly_and_every_holder_can_hold_one_token() -> None:
    """A burst of 1 over three holders: each needs one token of capacity to admit anything."""
    got = split(Budget(9, 60, 1), [Fraction(0)] * 3)
    assert [s.tokens_per_fill for s in got] == [3, 3, 3]
    assert [s.max_tokens for s in got] == [1, 1, 1]


def test_a_window_rule_holds_one_interval_of_its_rate_and_a_bucket_rule_its_burst() -> None:
    assert Budget.of(600, 60, None, 1.0) == Budget(600, 60, 10)
    assert Budget.of(3, 60, None, 1.0) == Budget(3, 60, 1)
    assert Budget.of(10, 1, 50, 1.0) == Budget(10, 1, 50)
    assert Budget.of(0, 60, None, 1.0) == Budget(0, 60, 0)


demands = st.lists(
    st.fractions(min_value=0, max_value=10_000, max_denominator=1000), min_size=1, max_size=12
)


@given(
    tokens=st.integers(0, 5000),
    fill_s=st.integers(1, 3600),
    burst=st.integers(0, 5000),
    asked=demands,
)
def test_the_shares_of_a_round_never_add_up_to_more_than_the_budget(
    tokens: int, fill_s: int, burst: int, asked: list[Fraction]
) -> None:
    """Sum of tokens_per_fill is exactly the limit (nobody asking included); sum of max_tokens
    is at most max(burst, holders); every holder can hold at least one token."""
    got = split(Budget(tokens, fill_s, burst), asked)
    assert len(got) == len(asked)
    assert sum(s.tokens_per_fill for s in got) == tokens
    holders = [s for s in got if not s.empty]
    assert sum(s.max_tokens for s in got) <= max(burst, len(holders))
    assert all(s.max_tokens >= 1 for s in holders)
    assert all(s == Share(0, 0) for s in got if s.empty)


@given(
    tokens=st.integers(0, 5000),
    burst=st.integers(0, 5000),
    asked=demands,
    most=st.integers(0, 12),
)
def test_with_most_no_more_envoys_hold_a_share_and_they_are_the_largest_parts(
    tokens: int, burst: int, asked: list[Fraction], most: int
) -> None:
    """``most`` (a reserve leaving room for that many holders): at most that many hold a
    share, each the one it would hold anyway in tokens, and the sums stay within the budget."""
    alone = split(Budget(tokens, 60, burst), asked)
    got = split(Budget(tokens, 60, burst), asked, most=most)
    holders = [i for i, share in enumerate(got) if not share.empty]
    assert len(holders) <= most
    assert all(got[i].tokens_per_fill == alone[i].tokens_per_fill for i in holders)
    assert sum(share.tokens_per_fill for share in got) <= tokens
    assert sum(share.max_tokens for share in got) <= max(burst, len(holders))
    dropped = [i for i, share in enumerate(alone) if not share.empty and got[i].empty]
    for i in holders:
        assert all(alone[i].tokens_per_fill >= alone[j].tokens_per_fill for j in dropped)
    if len([share for share in alone if not share.empty]) <= most:
        assert got == alone


@given(tokens=st.integers(1, 5000), asked=demands)
def test_under_contention_no_envoy_that_asked_nothing_holds_a_token(
    tokens: int, asked: list[Fraction]
) -> None:
    """Work-conserving: when the Envoys ask for more than the limit, every token goes to one
    that asked."""
    got = split(Budget(tokens, 60, tokens), asked)
    if sum(asked) > tokens:
        assert all(share.empty for share, demand in zip(got, asked, strict=True) if demand == 0)
