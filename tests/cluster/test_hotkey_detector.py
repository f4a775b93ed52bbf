"""HotKeyDetector: a Space-Saving sketch over a sliding interval, driven by a ManualClock."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import HotKeyDetector
from ratewarden.testing import ManualClock


def detector(threshold: float = 100.0, capacity: int = 8) -> tuple[HotKeyDetector, ManualClock]:
    clock = ManualClock()
    return HotKeyDetector(threshold, interval=1.0, capacity=capacity, clock=clock), clock


def test_a_key_over_the_threshold_is_reported_and_one_under_is_not() -> None:
    """200/s against a 100/s threshold is hot; 50/s is not, in the same second."""
    found, clock = detector()
    for _ in range(200):
        found.record("hot")
        clock.advance(0.004)
    for _ in range(50):
        found.record("cool")
    assert found.record("hot", 0) is True
    assert found.record("cool", 0) is False
    assert [k.key for k in found.hot()] == ["hot"]


def test_the_rate_slides_out_over_the_next_interval() -> None:
    """Counts of a finished interval weigh by the share of it still inside the sliding second."""
    found, clock = detector()
    for _ in range(300):
        found.record("k")
    assert found.rate("k").rate == 300
    clock.advance(1.5)  # half of the previous interval is still inside the window
    assert found.rate("k").rate == pytest.approx(150)
    clock.advance(1.0)  # two intervals later nothing is left
    assert found.rate("k").rate == 0
    assert found.hot() == []


def test_memory_is_bounded_by_the_capacity_whatever_the_number_of_keys() -> None:
    """Ten thousand distinct keys leave at most ``capacity`` counters per interval."""
    found, clock = detector(capacity=16)
    for n in range(10_000):
        found.record(f"k{n}")
    clock.advance(1.0)
    for n in range(10_000):
        found.record(f"j{n}")
    assert len(found._current) <= 16
    assert len(found._previous) <= 16


@settings(max_examples=200, deadline=None)
@given(
    stream=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=400),
    capacity=st.integers(min_value=1, max_value=12),
)
def test_space_saving_never_misses_a_key_above_n_over_capacity(
    stream: list[int], capacity: int
) -> None:
    """Within one interval: estimates never undercount, overcount by at most n/capacity, and
    every key with a true count above n/capacity is tracked."""
    found, _ = detector(capacity=capacity)
    for key in stream:
        found.record(f"k{key}")
    truth = collections.Counter(f"k{key}" for key in stream)
    slack = len(stream) / capacity
    for key, count in truth.items():
        estimate = found.rate(key)
        if count > slack:
            assert key in found._current
        if key in found._current:
            assert count <= estimate.rate <= count + slack
            assert estimate.rate - estimate.error <= count


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": float("inf")}, "threshold"),
        ({"threshold": 10, "interval": -1}, "interval"),
        ({"threshold": 10, "capacity": 0}, "capacity"),
        ({"threshold": True}, "threshold"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    """Each bad setting raises ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match=message):
        HotKeyDetector(**kwargs)  # type: ignore[arg-type]


def test_bad_keys_and_costs_are_refused_and_count_nothing() -> None:
    """An empty key or a negative cost raises and leaves the counts as they were."""
    found, _ = detector()
    found.record("k", 5)
    for key, cost in (("", 1), ("k", -1), ("k", 1.5)):
        with pytest.raises(ConfigurationError):
            found.record(key, cost)  # type: ignore[arg-type]
    assert found.rate("k").rate == 5
