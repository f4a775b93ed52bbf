"""Small inputs checked where they were taken silently: a SpaceSaving weight that is not whole,
and a ManualClock sleep that is not a finite number of seconds."""

from __future__ import annotations

import asyncio

import pytest

from ratewarden import ConfigurationError
from ratewarden.testing import ManualClock
from ratewarden.topk import SpaceSaving


@pytest.mark.parametrize("weight", [1.5, "1", True, None])
def test_a_weight_that_is_not_a_whole_number_is_refused(weight: object) -> None:
    """Counts stay whole: 1.5 would make float counts (carried into merge), "1" an internal
    TypeError. Nothing is counted."""
    sketch = SpaceSaving(2)
    sketch.add("y", 3)
    with pytest.raises(ConfigurationError) as raised:
        sketch.add("y", weight)  # type: ignore[arg-type]
    assert str(raised.value).startswith(f"SpaceSaving.add: weight {weight!r} must be a whole")
    assert sketch.get("y") == (3, 0) and sketch.total == 3


def test_whole_weights_still_count_and_below_one_only_read() -> None:
    """An int counts; 0 or less reads the count, as documented."""
    sketch = SpaceSaving(2)
    assert sketch.add("y", 2) == 2
    assert sketch.add("y", 0) == 2 and sketch.add("y", -1) == 2
    assert sketch.total == 2


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), "1", None, True])
def test_sleep_refuses_what_is_not_a_finite_number(seconds: object) -> None:
    """sleep and asleep refuse a non-number or non-finite number, leaving time as it was."""
    clock = ManualClock()
    with pytest.raises(ConfigurationError) as raised:
        clock.sleep(seconds)  # type: ignore[arg-type]
    assert str(raised.value) == f"ManualClock.sleep({seconds!r}): give a finite number of seconds"
    with pytest.raises(ConfigurationError, match=r"ManualClock\.asleep\("):
        asyncio.run(clock.asleep(seconds))  # type: ignore[arg-type]
    assert clock.now() == 1_700_000_000.0


def test_sleep_of_zero_or_less_returns_at_once_as_a_real_clock() -> None:
    """SystemClock.sleep returns at once for 0 or less (a computed wait may be negative); the
    manual clock does too, and a positive sleep advances it."""
    clock = ManualClock()
    clock.sleep(-1)
    clock.sleep(0)
    asyncio.run(clock.asleep(-0.5))
    assert clock.now() == 1_700_000_000.0
    clock.sleep(1.5)
    asyncio.run(clock.asleep(0.5))
    assert clock.now() == 1_700_000_002.0
