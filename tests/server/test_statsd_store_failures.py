"""StatsD's ``redis_error`` counts ShouldRateLimit calls the store failed, once a call, as
envoyproxy/ratelimit's service counts it; ``/metrics``' ``store_error`` counts descriptors.

A real redis-server is stopped; the StatsD lines are read off a UDP socket on loopback.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.server.stats import ServiceStats
from ratewarden.server.statsd import StatsdSink
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT, RedisServer
from tests.server.conftest import ALIGNED, OK, OVER, desc
from tests.server.test_stats import RULES, ask, value

pytestmark = pytest.mark.redis

REDIS_ERROR = "ratelimit.service.call.should_rate_limit.redis_error"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A UDP socket on loopback that StatsD lines are sent to."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((HOST, 0))
        sock.settimeout(5)
        yield sock


def _counts(sink: StatsdSink, stats: ServiceStats, listener: socket.socket) -> dict[str, int]:
    """One flush and send: the counter lines received, summed by name."""
    stats.flush()
    asyncio.run(sink.send())
    got: dict[str, int] = {}
    for line in listener.recv(65536).decode().splitlines():
        name, _, rest = line.rpartition(":")
        number, _, kind = rest.partition("|")
        if kind == "c":
            got[name] = got.get(name, 0) + int(number)
    return got


def test_redis_error_counts_failed_calls_not_their_descriptors(listener: socket.socket) -> None:
    """Store down: one call of three descriptors, then one of one, send ``redis_error:2``
    (it sent 4, one a descriptor), while ``should_rate_limit_error{store_error}`` counts the
    4 descriptors, as operations.md says."""
    from ratewarden.storage.redis import RedisStore

    server = RedisServer()
    clock = ManualClock(ALIGNED)
    store = RedisStore.from_url(server.url, clock=clock, timeout=STORE_TIMEOUT)
    try:
        stats = ServiceStats(clock=clock)
        sink = StatsdSink("udp", HOST, listener.getsockname()[1])
        stats.sinks.append(sink)
        svc = RateLimitService(config.loads(RULES, "rules.yaml"), store, hooks=stats)
        assert ask(svc, desc(("lenient", "l"))).overall_code == OK
        server.stop()
        three = (desc(("fragile", "f")), desc(("lenient", "l")), desc(("api_key", "k")))
        assert ask(svc, *three).overall_code == OVER
        assert ask(svc, desc(("lenient", "l"))).overall_code == OK
        assert _counts(sink, stats, listener)[REDIS_ERROR] == 2
        errors = "ratelimit_service_should_rate_limit_error_total"
        assert value(stats, errors, err_type="store_error") == 4
    finally:
        store.close()
        server.stop()
