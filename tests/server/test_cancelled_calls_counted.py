"""A ShouldRateLimit call the client gave up on (its deadline, Envoy's ``timeout``) counts in
``total_requests``, the response time (until it was cancelled) and
``should_rate_limit_error{err_type="cancelled"}``; over StatsD as
``ratelimit.service.call.should_rate_limit.cancelled``. The StatsD lines are read off a UDP
socket on loopback.
"""

from __future__ import annotations

import socket

import pytest

from ratewarden.server.stats import ServiceStats
from ratewarden.server.statsd import StatsdSink
from ratewarden.testing import ManualClock
from tests._servers import HOST
from tests.server.conftest import ALIGNED
from tests.server.test_stats import value
from tests.server.test_statsd_store_failures import _counts, listener

__all__ = ["listener"]  # the fixture

ERRORS = "ratelimit_service_should_rate_limit_error_total"


def test_a_cancelled_call_is_counted_and_timed() -> None:
    """Two calls answered, one cancelled after 0.3 s: three requests, one ``cancelled``, no
    ``service_error``."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    stats.request(0.002)
    stats.request(0.004)
    stats.request(0.3, cancelled=True)
    requests = "ratelimit_service_total_requests_total"
    assert value(stats, requests, grpc_method="ShouldRateLimit") == 3
    assert value(stats, "ratelimit_service_response_time_seconds_sum") == pytest.approx(0.306)
    assert value(stats, ERRORS, err_type="cancelled") == 1
    assert value(stats, ERRORS, err_type="service_error") == 0


def test_statsd_sends_the_cancelled_calls(listener: socket.socket) -> None:
    """StatsD: ``total_requests`` counts them, and ``should_rate_limit.cancelled``."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    sink = StatsdSink("udp", HOST, listener.getsockname()[1])
    stats.sinks.append(sink)
    stats.request(0.002)
    stats.request(0.3, cancelled=True)
    stats.request(0.3, cancelled=True)
    counts = _counts(sink, stats, listener)
    assert counts["ratelimit_server.ShouldRateLimit.total_requests"] == 3
    assert counts["ratelimit.service.call.should_rate_limit.cancelled"] == 2
