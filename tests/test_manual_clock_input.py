"""ManualClock's time is a whole number of microseconds from the epoch to its latest instant
(2155, past which a state 100 years ahead leaves what a Redis number holds exactly). Anything
else is a ConfigurationError that leaves the clock where it was: a float of microseconds made
the kernel raise a bare TypeError on every hit and the pure path return float counts."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from ratewarden import Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.rate import MAX_PERIOD_US
from ratewarden.testing import ManualClock

START_US = 1_700_000_000_000_000
LATEST_US = 2**53 - 1 - MAX_PERIOD_US


@pytest.mark.parametrize("amount", [1e6, 0.5, "1", None, True, -1])
def test_advance_us_takes_a_whole_number_of_microseconds(amount: object) -> None:
    """advance_us(1e6), a natural way to write a second, is refused (advance(1.0) says it)."""
    clock = ManualClock()
    with pytest.raises(ConfigurationError, match=r"^ManualClock\.advance_us\("):
        clock.advance_us(amount)  # type: ignore[arg-type]
    assert clock.now_us() == START_US and type(clock.now_us()) is int


def test_a_float_advance_us_no_longer_breaks_the_default_algorithm() -> None:
    """The walk's case: after a refused advance_us(1e6) the limiter decides as before."""
    clock = ManualClock()
    limiter = Limiter(clock=clock)
    rate = Rate.parse("1/second")
    assert limiter.hit("k", rate).allowed
    with pytest.raises(ConfigurationError):
        clock.advance_us(1e6)  # type: ignore[arg-type]
    clock.advance_us(1_000_000)
    decision = limiter.hit("k", rate)
    assert decision.allowed and type(decision.remaining) is int


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf, "1", None, True, -1])
def test_advance_takes_a_finite_number_of_seconds_or_a_timedelta(seconds: object) -> None:
    """nan, inf, a string, None or a bool: refused in the project's words, not Python's."""
    clock = ManualClock()
    with pytest.raises(ConfigurationError, match=r"^ManualClock\.advance\("):
        clock.advance(seconds)  # type: ignore[arg-type]
    assert clock.now_us() == START_US
    clock.advance(0.5)
    clock.advance(timedelta(milliseconds=500))
    assert clock.now_us() == START_US + 1_000_000


@pytest.mark.parametrize("start", [math.nan, math.inf, "x", None, True, -5, -0.5])
def test_the_start_and_set_take_a_finite_instant_from_the_epoch(start: object) -> None:
    """ManualClock(inf), ManualClock('x') and set(-5) (which the constructor already refused
    as negative) are ConfigurationErrors; set leaves the clock where it was."""
    with pytest.raises(ConfigurationError, match=r"^ManualClock: start "):
        ManualClock(start)  # type: ignore[arg-type]
    clock = ManualClock()
    with pytest.raises(ConfigurationError, match=r"^ManualClock\.set: instant "):
        clock.set(start)  # type: ignore[arg-type]
    assert clock.now_us() == START_US
    clock.set(0)
    assert clock.now_us() == 0


def test_no_instant_past_the_latest_exact_one() -> None:
    """The clock reaches LATEST_US (2155) and no further, by any of its four ways."""
    clock = ManualClock(0)
    clock.advance_us(LATEST_US)
    assert clock.now_us() == LATEST_US
    for move in (
        lambda: clock.advance_us(1),
        lambda: clock.advance(1),
        lambda: clock.advance(1e300),
        lambda: clock.set(LATEST_US / 1e6 + 1),
        lambda: ManualClock(1e12),
    ):
        with pytest.raises(ConfigurationError, match="past 5,853,599,254 s"):
            move()
    assert clock.now_us() == LATEST_US
