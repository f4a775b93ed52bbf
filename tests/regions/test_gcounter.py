"""The G-counter merge is a join: commutative, associative, idempotent, and never loses counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratewarden.errors import ConfigurationError
from ratewarden.regions import GCounter

regions = st.sampled_from(["us", "eu", "ap", "sa", "af"])
counters = st.dictionaries(regions, st.integers(0, 10**12)).map(GCounter.of)


@given(counters, counters)
def test_merge_is_commutative(a: GCounter, b: GCounter) -> None:
    """a.merge(b) == b.merge(a): the order two regions exchange states in does not matter."""
    assert a.merge(b) == b.merge(a)


@given(counters, counters, counters)
def test_merge_is_associative(a: GCounter, b: GCounter, c: GCounter) -> None:
    """(a merge b) merge c == a merge (b merge c): gossip through a third region is the same."""
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(counters, counters)
def test_merge_is_idempotent(a: GCounter, b: GCounter) -> None:
    """Merging a state twice (a repeated sync) changes nothing the second time."""
    assert a.merge(a) == a
    assert a.merge(b).merge(b) == a.merge(b)


@given(counters, counters)
def test_merge_keeps_the_max_of_each_region(a: GCounter, b: GCounter) -> None:
    """Each entry of the merge is the larger of the two; the total never shrinks."""
    merged = a.merge(b)
    for region in {r for r, _ in a} | {r for r, _ in b}:
        assert merged.get(region) == max(a.get(region), b.get(region))
    assert merged.value >= max(a.value, b.value)


@given(st.lists(st.tuples(regions, st.integers(0, 1000)), max_size=40), st.randoms())
def test_replicas_that_saw_the_same_increments_agree(
    steps: list[tuple[str, int]], rnd: object
) -> None:
    """Each region counts its own increments; merged in any order, every replica sums them all."""
    own: dict[str, GCounter] = {}
    for region, amount in steps:
        own[region] = own.get(region, GCounter()).increment(region, amount)
    states = list(own.values())
    rnd.shuffle(states)  # type: ignore[attr-defined]
    merged = GCounter()
    for state in states:
        merged = merged.merge(state)
    assert merged.value == sum(amount for _, amount in steps)


@pytest.mark.parametrize("counts", [{"us": -1}, {"": 1}, {"u:s": 1}, {"us": 1.5}, {"us": True}])
def test_bad_entries_are_refused(counts: dict[str, object]) -> None:
    """Negative, fractional or boolean counts and unusable region names raise ConfigurationError."""
    with pytest.raises(ConfigurationError):
        GCounter.of(counts)  # type: ignore[arg-type]
