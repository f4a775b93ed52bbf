"""Several calls decided in one store step (``hit_each_flow``, the service's budget
descriptors) leave the half-open breaker able to probe again, however the step ends.

Before, a call the breaker refused (no failure mode) raised ``CircuitOpenError`` while an
earlier call of the same step held the half-open circuit's one probe, never sent and never
given back; and a call whose reply was an error was raised before the later calls' replies
were told to the breaker. Either way the circuit stayed half open with a probe "in flight"
for ever: every later call on a healthy store was refused.

A real redis-server; the breaker on a ManualClock.
"""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden import Limiter, Rate
from ratewarden.errors import CircuitOpenError
from ratewarden.limiter import CircuitBreaker, EachCall
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer

pytestmark = pytest.mark.redis

RATE = Rate(10, 60)


def _opened(redis_server: RedisServer, probes: int) -> tuple[Limiter, CircuitBreaker]:
    redis_server.client().flushall()
    clock = ManualClock()
    breaker = CircuitBreaker(failures=1, cooldown=1.0, probes=probes, clock=clock)
    limiter = Limiter(RedisStore.from_url(redis_server.url, timeout=5.0), breaker=breaker)
    assert limiter.hit("warm", RATE).allowed
    breaker.failure()
    assert breaker.state == "open"
    clock.advance(1.0)  # the next call is the probe
    return limiter, breaker


def _via_store(limiter: Limiter, calls: list[EachCall]) -> Any:
    def via_all(positions: list[int]) -> list[Any]:
        return [limiter.store.hit("gcra", calls[i].key, RATE, calls[i].cost) for i in positions]

    return via_all


def test_a_refused_call_gives_back_the_probe_an_earlier_call_held(
    redis_server: RedisServer,
) -> None:
    """Two calls with no failure mode, one probe: the first takes it, the second is refused
    and raised. The next call probes and closes the circuit (before: refused for ever)."""
    limiter, breaker = _opened(redis_server, probes=1)
    calls = [EachCall("a", RATE, 1), EachCall("b", RATE, 1)]
    with pytest.raises(CircuitOpenError):
        limiter.run(limiter.hit_each_flow(calls, _via_store(limiter, calls)))
    assert limiter.hit("next", RATE).allowed
    assert breaker.state == "closed"
    limiter.store.close()


def test_every_reply_is_told_to_the_breaker_before_an_error_is_raised(
    redis_server: RedisServer,
) -> None:
    """Two probes let through; the first call's reply is an error (a bug, no verdict), the
    second's a decision: the second's success closes the circuit, though the first's error
    is raised (before: it was raised first, and the circuit stayed half open)."""
    limiter, breaker = _opened(redis_server, probes=2)
    calls = [EachCall("a", RATE, 1), EachCall("b", RATE, 1)]
    store_hits = _via_store(limiter, calls)

    def via_all(positions: list[int]) -> list[Any]:
        return [ValueError("a bug in the first call's reply"), *store_hits(positions[1:])]

    with pytest.raises(ValueError, match="a bug"):
        limiter.run(limiter.hit_each_flow(calls, via_all))
    assert breaker.state == "closed"
    limiter.store.close()
