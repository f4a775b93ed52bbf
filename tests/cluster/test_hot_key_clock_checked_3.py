"""A hot-key class given something that is not a clock refuses it when built, with the
``ConfigurationError`` every other clock-taking class gives (``check_clock``): before, the
detector failed with an ``AttributeError`` in its constructor and the limiter took the value
and failed with one at its first hit."""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden import MemoryStore
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock


@pytest.mark.parametrize("clock", ["x", 5, object()])
def test_a_detector_refuses_a_clock_without_now_us(clock: Any) -> None:
    """``HotKeyDetector(10, clock=...)`` names itself and the value, and says what to give."""
    with pytest.raises(ConfigurationError, match=r"HotKeyDetector: clock .* is not a clock"):
        HotKeyDetector(10, clock=clock)


@pytest.mark.parametrize("twin", ["blocking", "asyncio"])
def test_a_hot_key_limiter_refuses_a_clock_without_now_us_when_built(twin: str) -> None:
    """The limiter refuses it in its constructor, not at the first hit."""
    if twin == "asyncio":
        store: Any = AsyncMemoryStore()
        kind: Any = AsyncHotKeyLimiter
        cells: Any = AsyncCellLimiter(store)
    else:
        store = MemoryStore()
        kind, cells = HotKeyLimiter, CellLimiter(store)
    with pytest.raises(ConfigurationError, match=rf"{kind.__name__}: clock 'x' .* not a clock"):
        kind(store, cells, detector=HotKeyDetector(10), clock="x")


def test_a_real_clock_is_still_taken() -> None:
    """A ManualClock is the limiter's and the detector's clock, as given."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    detector = HotKeyDetector(10, clock=clock)
    limiter = HotKeyLimiter(store, CellLimiter(store), detector=detector, clock=clock)
    assert detector.clock is clock and limiter.clock is clock
