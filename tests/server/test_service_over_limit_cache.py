"""The over-limit cache: a counter the store denied is denied in-process until its retry time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import OK, OVER, Harness, desc

Make = Callable[..., Harness]

RULES = """
domain: d
descriptors:
  - key: gcra
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 6, burst: 2}
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 2}
"""


def test_a_denied_counter_is_denied_again_without_a_store_call(rls: Make) -> None:
    """Same answer as the store would give, duration counting down, no store call, hook told."""
    h = rls(RULES, over_limit_cache=100)
    assert [h.codes(desc(("gcra", "a")))[0] for _ in range(3)] == [OK, OK, OVER]
    calls = len(h.store.calls)
    first = h.hooks.outcomes[-1]
    assert first.over_limit and not first.local_cache
    h.clock.advance(4)
    again = h.ask(desc(("gcra", "a"))).statuses[0]
    assert again.code == OVER
    assert len(h.store.calls) == calls
    assert h.hooks.outcomes[-1].local_cache
    assert again.duration_until_reset.seconds == 6  # 10 s to the next slot, 4 s later
    h.clock.advance(6)  # the retry time: the store decides again, and allows
    assert h.codes(desc(("gcra", "a")))[0] == OK
    assert len(h.store.calls) == calls + 1


def test_the_cached_answer_matches_the_store() -> None:
    """With and without the cache, the same traffic gets the same statuses at the same times."""
    clock = ManualClock()
    loaded = config.loads(RULES, "test.yaml")
    plain = RateLimitService(loaded, MemoryStore(clock=clock))
    cached_store = CountingStore(MemoryStore(clock=clock))
    cached = RateLimitService(loaded, cached_store, over_limit_cache=100)
    arrivals = [0, 0, 0, 1, 2, 3, 4, 9, 10, 10, 12, 25, 25, 25, 26, 61, 61, 62, 63, 64, 90]
    now = 0.0
    for at in arrivals:
        clock.advance(at - now)
        now = at
        for key in ("gcra", "window"):
            request = rls_pb2.RateLimitRequest(
                domain="d", descriptors=[desc((key, "same"))], hits_addend=0
            )
            a, b = plain.should_rate_limit(request), cached.should_rate_limit(request)
            assert a == b, f"at {at}s on {key}: {a} != {b}"
    assert cached_store.calls < 2 * len(arrivals)


class CountingStore:
    """A real store that counts the calls it answers."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.clock = inner.clock
        self.calls = 0

    def hit(self, algorithm: str, key: str, rates: Any, cost: int = 1) -> Decision:
        self.calls += 1
        return self.inner.hit(algorithm, key, rates, cost)


def test_a_smaller_request_still_asks_the_store(rls: Make) -> None:
    """A denial of 2 hits does not answer a request of 1: it might fit."""
    h = rls(RULES, over_limit_cache=100)
    assert h.codes(desc(("window", "s"), hits=1))[0] == OK
    assert h.codes(desc(("window", "s"), hits=2))[0] == OVER
    calls = len(h.store.calls)
    assert h.codes(desc(("window", "s"), hits=1))[0] == OK
    assert len(h.store.calls) == calls + 1


def test_a_reload_empties_the_cache(rls: Make) -> None:
    """A new config may raise the limit: denials made under the old one are forgotten."""
    h = rls(RULES, over_limit_cache=100)
    for _ in range(3):
        h.codes(desc(("window", "r")))
    raised = RULES.replace("requests_per_unit: 2}", "requests_per_unit: 5}")
    h.service.swap_config(config.loads(raised, "raised.yaml"))
    assert h.codes(desc(("window", "r")))[0] == OK


def test_the_cache_is_off_by_default_in_the_library_and_validated() -> None:
    loaded = config.loads(RULES, "test.yaml")
    assert RateLimitService(loaded, MemoryStore()).over_limit_cache is None
    with pytest.raises(ConfigurationError, match="over_limit_cache"):
        RateLimitService(loaded, MemoryStore(), over_limit_cache="many")  # type: ignore[arg-type]
