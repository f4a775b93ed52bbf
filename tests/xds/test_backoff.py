"""The wait between two connections to the xDS server: doubled, jittered, bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ratewarden.server.xds import backoff


def test_the_wait_doubles_per_failure_in_a_row_up_to_the_cap() -> None:
    """With the jitter at its middle (draw 0.5), the waits are the steps themselves."""
    assert [backoff(n, 3.0, 60.0, 0.5) for n in range(1, 8)] == [3, 6, 12, 24, 48, 60, 60]


def test_the_jitter_spreads_a_wait_between_half_and_one_and_a_half_steps() -> None:
    """The draw (uniform in [0, 1)) spreads a wait from half a step to under 1.5 steps."""
    assert backoff(1, 2.0, 60.0, 0.0) == 1.0
    assert backoff(1, 2.0, 60.0, 0.999) < 3.0


@given(
    failures=st.integers(1, 10_000),
    interval=st.floats(0.001, 100.0),
    ceiling=st.floats(0.001, 1000.0),
    draw=st.floats(0.0, 0.999999),
)
def test_a_wait_is_never_above_the_cap_nor_zero(
    failures: int, interval: float, ceiling: float, draw: float
) -> None:
    """Whatever the failures, interval, cap and draw: a wait is above 0 and at most the cap."""
    wait = backoff(failures, interval, max(ceiling, interval), draw)
    assert 0 < wait <= max(ceiling, interval)
