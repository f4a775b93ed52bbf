"""A several-rate Decision's reset_after is the longest of its layers' (every layer back to full
capacity), not the binding layer's, on every store; the binding layer gives limit, remaining,
retry_after, rate and refill_after (reference.md's Decision row)."""

from __future__ import annotations

import pytest
import redis

from ratewarden import Rate
from ratewarden.decision import Decision
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT

SECOND, HOUR = Rate.parse("10/second"), Rate.parse("1000/hour")


def speaks_for_its_binding_layer_but_resets_with_the_longest(decision: Decision) -> None:
    per_second, per_hour = decision.layers
    assert (decision.rate, decision.limit, decision.remaining) == (
        SECOND,
        per_second.limit,
        per_second.remaining,
    )
    assert (decision.retry_after, decision.refill_after) == (
        per_second.retry_after,
        per_second.refill_after,
    )
    assert per_hour.reset_after > per_second.reset_after
    assert decision.reset_after == per_hour.reset_after


def test_memory_allowed_and_denied() -> None:
    """Frozen time, GCRA, 10/second and 1000/hour: the per-second layer binds (least room,
    then the denial); reset_after is the hourly layer's, 3.6 s after one hit, 36 s after ten."""
    store = MemoryStore(clock=ManualClock())
    first = store.hit("gcra", "k", [SECOND, HOUR])
    speaks_for_its_binding_layer_but_resets_with_the_longest(first)
    assert (first.remaining, first.layers[0].reset_after, first.reset_after) == (9, 0.1, 3.6)
    for _ in range(9):
        store.hit("gcra", "k", [SECOND, HOUR])
    denied = store.hit("gcra", "k", [SECOND, HOUR])
    speaks_for_its_binding_layer_but_resets_with_the_longest(denied)
    assert not denied.allowed
    assert (denied.retry_after, denied.layers[0].reset_after, denied.reset_after) == (
        0.1,
        1.0,
        36.0,
    )


@pytest.mark.redis
def test_redis_allowed_and_denied(redis_client: redis.Redis) -> None:
    """The same on a redis-server (its TIME the clock)."""
    store = RedisStore(redis_client, timeout=STORE_TIMEOUT)
    speaks_for_its_binding_layer_but_resets_with_the_longest(store.hit("gcra", "k", [SECOND, HOUR]))
    for _ in range(9):
        store.hit("gcra", "k", [SECOND, HOUR])
    denied = store.hit("gcra", "k", [SECOND, HOUR])
    if denied.allowed:  # a tenth of a second passed between the hits: one more fills it
        denied = store.hit("gcra", "k", [SECOND, HOUR], 10)
    assert not denied.allowed
    speaks_for_its_binding_layer_but_resets_with_the_longest(denied)
