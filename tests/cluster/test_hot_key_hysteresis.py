"""Detection does not flap near the threshold: a detected key leaves only after its rate has
stayed at or below ``exit_ratio`` x the threshold (default 0.5) for ``hold`` seconds.

Measured as in the audit (ManualClock, seeded Poisson arrivals, HotKeyDetector(100), the default
2 s hold, 120 s): with the time hold alone (``exit_ratio=1``) a key at 0.95x the threshold
switched 33 times, each switch a carry of N + 1 peeks and up to N hits; with the default exit
threshold it switches in once and stays.
"""

from __future__ import annotations

import random

import pytest

from ratewarden import MemoryStore, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import CellLimiter, HotKeyDetector, HotKeyLimiter
from ratewarden.testing import ManualClock

THRESHOLD = 100
RATE = Rate.parse("100000/minute")


def hot_key_limiter(clock: ManualClock, **options: float) -> HotKeyLimiter:
    store = MemoryStore(clock=clock)
    detector = HotKeyDetector(THRESHOLD, clock=clock)
    return HotKeyLimiter(store, CellLimiter(store, 3), detector=detector, clock=clock, **options)


def switches(limiter: HotKeyLimiter, clock: ManualClock, per_second: float, seconds: float) -> int:
    """Poisson arrivals at ``per_second`` (seed 1) for ``seconds``: how often the key went in or
    out of the mitigation."""
    rng = random.Random(1)
    count, was_hot, elapsed = 0, limiter.is_hot("k"), 0.0
    while elapsed < seconds:
        step = rng.expovariate(per_second)
        elapsed += step
        clock.advance(step)
        limiter.hit("k", RATE)
        now_hot = limiter.is_hot("k")
        count += now_hot != was_hot
        was_hot = now_hot
    return count


@pytest.mark.parametrize("ratio", [0.8, 0.95, 1.0, 1.05, 1.2])
def test_a_key_near_the_threshold_switches_at_most_once_in_two_minutes(ratio: float) -> None:
    """0.8x to 1.2x the threshold for 120 s: at most one switch (in); before, 10, 33, 19, 5
    and 1 switches."""
    clock = ManualClock(1_700_000_000)
    assert switches(hot_key_limiter(clock), clock, THRESHOLD * ratio, 120) <= 1


def test_the_time_hold_alone_flaps_which_the_exit_threshold_prevents() -> None:
    """The same 0.95x traffic with ``exit_ratio=1`` (no rate hysteresis, the old behaviour):
    more than 20 switches — what the default removes."""
    clock = ManualClock(1_700_000_000)
    limiter = hot_key_limiter(clock, exit_ratio=1)
    assert switches(limiter, clock, THRESHOLD * 0.95, 120) > 20


def test_a_held_key_stays_above_the_exit_threshold_and_leaves_below_it() -> None:
    """Hot at 1.5x; then at 0.7x (above 0.5x) for 30 s it stays; then at 0.3x it leaves, within
    the hold plus the detector's interval (the sliding estimate must fall first) — and does not
    come back."""
    clock = ManualClock(1_700_000_000)
    limiter = hot_key_limiter(clock)
    assert switches(limiter, clock, THRESHOLD * 1.5, 5) == 1
    assert switches(limiter, clock, THRESHOLD * 0.7, 30) == 0
    assert limiter.is_hot("k")
    rng = random.Random(2)
    elapsed = 0.0
    while limiter.is_hot("k"):
        step = rng.expovariate(THRESHOLD * 0.3)
        elapsed += step
        clock.advance(step)
        limiter.hit("k", RATE)
    assert elapsed <= 2.0 + 1.0 + 0.1  # hold 2 s, interval 1 s
    assert switches(limiter, clock, THRESHOLD * 0.3, 30) == 0


def test_a_custom_exit_ratio_is_the_share_of_the_threshold_to_fall_below() -> None:
    """``exit_ratio=0.8``: 0.7x the threshold is below it, so the key leaves after its hold."""
    clock = ManualClock(1_700_000_000)
    limiter = hot_key_limiter(clock, exit_ratio=0.8)
    assert switches(limiter, clock, THRESHOLD * 1.5, 5) == 1
    assert switches(limiter, clock, THRESHOLD * 0.7, 30) == 1


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan"), "0.5", True, None])
def test_an_exit_ratio_outside_zero_to_one_is_refused(bad: object) -> None:
    """A ConfigurationError naming exit_ratio and the value."""
    clock = ManualClock(1_700_000_000)
    with pytest.raises(ConfigurationError, match=r"exit_ratio .* must be a number in \(0, 1\]"):
        hot_key_limiter(clock, exit_ratio=bad)  # type: ignore[arg-type]
