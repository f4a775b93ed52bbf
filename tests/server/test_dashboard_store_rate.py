"""The dashboard's store latency panel: calls per second cover the same minute as its quantiles.

The panel is headed "Store latency (last minute)"; its calls/s, p50, p99 and max all read
the last ``history_s`` (60) seconds. Pure logic on a ManualClock.
"""

from __future__ import annotations

import pytest

from ratewarden.server.dashboard.live import LiveStats
from ratewarden.server.dashboard.view import render
from ratewarden.testing import ManualClock

T0 = 1_700_006_400.0


def test_calls_per_second_cover_the_minute_the_quantiles_cover() -> None:
    """36 calls, then 12 s of quiet: 0.6 calls/s over the minute (not 0.00 from the last 10 s),
    beside the max of the same 36 calls; a minute after them, none in either."""
    clock = ManualClock(T0)
    live = LiveStats(clock)
    for _ in range(36):
        live.store_call(0.002)
    clock.advance(12)
    latency = render([live.state()], [], clock.now())["store_latency"]
    assert latency["calls"] == 36
    assert latency["per_second"] == pytest.approx(36 / 60)
    assert latency["max_s"] == 0.002
    assert sum(latency["history"]) == 36
    clock.advance(48)  # the calls leave the rate and the quantiles together
    latency = render([live.state()], [], clock.now())["store_latency"]
    assert (latency["calls"], latency["per_second"], latency["p50_s"]) == (0, 0.0, None)
