"""What docs/algorithms.md says each window algorithm does at its edges, measured: the sliding
window's shortfall at small limits, the fixed window's epoch-aligned weeks, months and years, and
the sliding log's promise over a trailing (half-open) period, not a closed one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ratewarden import Rate
from tests.algorithms._limiter import NOON, SECOND, limiter_at


def _steady(limit: int, fraction: float, periods: int = 200) -> tuple[int, int]:
    """(admitted, denied) of a client sending evenly spaced at ``fraction`` of ``limit``/second."""
    limiter, clock = limiter_at("sliding_window")
    rate = Rate(limit, 1)
    gap = SECOND / limit / fraction
    start = clock.now_us()
    admitted = denied = 0
    for i in range(int(periods * limit * fraction)):
        clock.advance_us(start + round(i * gap) - clock.now_us())
        if limiter.hit("k", rate).allowed:
            admitted += 1
        else:
            denied += 1
    return admitted, denied


def _retrying(algorithm: str, limit: int, periods: int = 200) -> int:
    """Requests admitted over ``periods`` seconds to a client that retries at each retry_after."""
    limiter, clock = limiter_at(algorithm)
    rate = Rate(limit, 1)
    end = clock.now_us() + periods * SECOND
    admitted = 0
    while True:
        decision = limiter.hit("k", rate)
        if decision.allowed:
            admitted += 1
            continue
        step = round(decision.retry_after * SECOND)
        if clock.now_us() + step >= end:
            return admitted
        clock.advance_us(step)


@pytest.mark.parametrize(
    ("limit", "at_75", "at_90"), [(2, 0.67, 0.56), (3, 0.89, 0.74), (5, 1.0, 0.89), (20, 1.0, 1.0)]
)
def test_sliding_window_refuses_a_steady_client_within_a_small_limit(
    limit: int, at_75: float, at_90: float
) -> None:
    """The table's shares: an even client at 75% and 90% of the rate is admitted that often."""
    for fraction, share in ((0.75, at_75), (0.9, at_90)):
        admitted, denied = _steady(limit, fraction)
        assert round(admitted / (admitted + denied), 2) == share


@pytest.mark.parametrize("limit", [2, 3, 10, 20])
def test_a_retrying_client_gets_limit_minus_one_per_period_from_the_sliding_window(
    limit: int,
) -> None:
    """limit - 1 per period under sliding_window (within one period's worth over 200); gcra and
    sliding_log give the limit."""
    assert abs(_retrying("sliding_window", limit) - 200 * (limit - 1)) <= limit
    assert _retrying("sliding_log", limit) >= 200 * limit
    assert _retrying("gcra", limit) >= 200 * limit


@pytest.mark.parametrize(
    ("text", "taken", "ends"),
    [
        ("1/week", "2023-11-13", "2023-11-16"),  # a Monday; weeks end (and start) on Thursdays
        ("1/week", "2023-11-16", "2023-11-23"),
        ("1000/month", "2023-11-01", "2023-11-19"),
        ("1/year", "2024-01-01", "2024-12-18"),
        ("1/day", "2023-11-01", "2023-11-02"),
    ],
)
def test_fixed_windows_are_counted_from_the_epoch_not_the_calendar(
    text: str, taken: str, ends: str
) -> None:
    """The window holding ``taken`` (00:00 UTC) ends at 00:00 UTC on ``ends``."""
    start = datetime.fromisoformat(taken).replace(tzinfo=UTC).timestamp()
    limiter, _ = limiter_at("fixed_window", start)
    decision = limiter.hit("k", Rate.parse(text))
    end = datetime.fromtimestamp(start + decision.reset_after, UTC)
    assert end == datetime.fromisoformat(ends).replace(tzinfo=UTC)


def test_the_sliding_log_holds_the_limit_in_a_trailing_period_not_a_closed_one() -> None:
    """100 at t, then 100 more at t + 60 s exactly (the first 100 age out at that instant), but
    not one at t + 60 s - 1 us: (t - 60 s, t] never holds more than 100, [t, t + 60 s] holds 200."""
    limiter, clock = limiter_at("sliding_log", NOON)
    rate = Rate.parse("100/minute")
    assert all(limiter.hit("k", rate).allowed for _ in range(100))
    clock.advance_us(60 * SECOND - 1)
    assert not limiter.hit("k", rate).allowed
    clock.advance_us(1)
    assert all(limiter.hit("k", rate).allowed for _ in range(100))
    assert not limiter.hit("k", rate).allowed
