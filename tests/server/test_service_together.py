"""One store step for all of a request's descriptors (the store's ``hit_all``).

Over every backend and both twins: on the memory store and standalone Redis a
request with several enforcing descriptors of one algorithm is decided in one
atomic step; on a Cluster, whose counters sit on different slots, and for
requests that need more (shadow or quota rules, two algorithms, one counter
twice, a cached denial) the service checks, then charges.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server import config
from ratewarden.server.service import AsyncRateLimitService, RateLimitService
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import CircuitBreaker
from tests._servers import STORE_TIMEOUT, RedisServer
from tests.server.conftest import ALIGNED, OK, OVER, SERVICE_RULES, Harness, desc

Make = Any


def _kinds(h: Harness) -> list[str]:
    return [kind for kind, _ in h.store.steps]


def test_an_allowed_request_is_one_store_step(rls: Make) -> None:
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("a", "x")), desc(("b", "y")), desc(("c", "z")), hits=2) == [OK] * 4
    if h.clustered:  # three slots: checked, then charged, hit by hit
        assert h.store.calls == [(key, cost) for cost in (0, 2) for key in _keys(h, 3)]
    else:
        assert h.store.steps == [("hit_all", [(key, 2) for key in _keys(h, 3)])]
    assert (h.remaining(("a", "x")), h.remaining(("b", "y")), h.remaining(("c", "z"))) == (0, 3, 7)


def _keys(h: Harness, count: int) -> list[str]:
    """The counter keys of the first request's ``count`` descriptors, in request order."""
    return [key for key, _ in h.store.calls[:count]]


def test_a_denied_request_is_one_store_step_and_charges_nothing(rls: Make) -> None:
    h = rls(SERVICE_RULES)
    h.ask(desc(("a", "x")), hits=2)
    h.store.steps.clear()
    response = h.ask(desc(("b", "y")), desc(("a", "x")), desc(("c", "z")))
    assert [response.overall_code, *(s.code for s in response.statuses)] == [OVER, OK, OVER, OK]
    assert [s.limit_remaining for s in response.statuses] == [5, 0, 9]
    assert response.statuses[1].duration_until_reset.seconds == 60
    if not h.clustered:
        assert _kinds(h) == ["hit_all"]
    assert (h.remaining(("b", "y")), h.remaining(("c", "z"))) == (5, 9)


@pytest.mark.parametrize(
    "descriptors",
    [
        [desc(("a", "x")), desc(("shadow", "s"))],
        [desc(("a", "x")), desc(("q", "v"))],
        [desc(("a", "x")), desc(("g", "v"))],
        [desc(("a", "x")), desc(("a", "x"))],
    ],
    ids=["shadow", "quota", "two-algorithms", "one-counter-twice"],
)
def test_requests_that_need_more_are_checked_then_charged(rls: Make, descriptors: Any) -> None:
    h = rls(SERVICE_RULES)
    h.ask(*descriptors)
    assert _kinds(h) == ["hit"] * 4
    assert [cost for _, cost in h.store.calls] == [0, 0, 1, 1]


def test_a_cached_denial_is_answered_without_a_joint_step(rls: Make) -> None:
    h = rls(SERVICE_RULES, over_limit_cache=100)
    h.ask(desc(("a", "x")), hits=2)
    assert h.codes(desc(("a", "x"))) == [OVER, OVER]  # remembered now
    h.store.steps.clear()
    assert h.codes(desc(("b", "y")), desc(("a", "x"))) == [OVER, OK, OVER]
    assert "hit_all" not in _kinds(h)
    assert h.remaining(("b", "y")) == 5


def test_charge_denied_stays_one_store_call_per_descriptor(rls: Make) -> None:
    """charge_denied: no joint step; each fixed window is one call of its own, the
    charged_window op (it counts denied hits too), and a GCRA one a hit."""
    h = rls(SERVICE_RULES, charge_denied=True)
    h.ask(desc(("a", "x")), desc(("b", "y")), desc(("g", "z")))
    assert sorted(_kinds(h)) == ["apply", "apply", "hit"]


# ---------------------------------------------------------------- the store fails a joint step


def test_an_outage_costs_one_joint_call_and_open_rules_allow(rls: Make) -> None:
    h = rls(SERVICE_RULES)
    h.outage.down = True
    assert h.codes(desc(("open", "o")), desc(("open", "p"))) == [OK, OK, OK]
    if not h.clustered:
        assert _kinds(h) == ["hit_all"]
    assert len(h.hooks.store_errors) == 2  # one a descriptor: a failed check is not charged


def test_local_rules_beside_a_closed_one_are_only_checked(rls: Make) -> None:
    """closed denies the request, so the local counter takes nothing."""
    h = rls(SERVICE_RULES)
    h.outage.down = True
    for _ in range(3):
        assert h.codes(desc(("closed", "c")), desc(("local", "l"))) == [OVER, OVER, OK]
    assert h.codes(desc(("local", "l")), hits=2) == [OK, OK]  # both still there, locally


def test_local_rules_are_decided_together_on_the_local_store(rls: Make) -> None:
    """local (2/min) runs out first: the request is denied and local5 keeps its room."""
    h = rls(SERVICE_RULES)
    h.outage.down = True
    for _ in range(2):
        assert h.codes(desc(("local", "l")), desc(("local5", "m"))) == [OK, OK, OK]
    assert h.codes(desc(("local", "l")), desc(("local5", "m"))) == [OVER, OVER, OK]
    assert h.codes(desc(("local5", "m")), hits=3) == [OK, OK]
    assert h.codes(desc(("local5", "m"))) == [OVER, OVER]


def test_an_open_breaker_answers_joint_steps_without_the_store(rls: Make) -> None:
    h = rls(SERVICE_RULES)
    h.service.breaker = CircuitBreaker(failures=2, failure_ratio=None, cooldown=5.0, clock=h.clock)
    h.outage.down = True
    for _ in range(2):
        h.ask(desc(("open", "o")), desc(("closed", "c")))
    tried = len(h.store.steps)
    for _ in range(5):
        assert h.codes(desc(("open", "o")), desc(("closed", "c"))) == [OVER, OK, OVER]
    assert len(h.store.steps) == tried
    h.outage.down = False
    h.clock.advance(5)
    assert h.codes(desc(("open", "o")), desc(("closed", "c"))) == [OK, OK, OK]


# ---------------------------------------------------------------- counted by Redis itself


def _evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def _request(*values: str) -> Any:
    return rls_pb2.RateLimitRequest(domain="d", descriptors=[desc((key, "v")) for key in values])


@pytest.mark.redis
def test_redis_runs_one_script_per_request(redis_server: RedisServer) -> None:
    """Three descriptors, allowed or denied: one EVALSHA each time (commandstats)."""
    client = redis_server.client()
    client.flushall()
    store = RedisStore(client, clock=ManualClock(ALIGNED), timeout=STORE_TIMEOUT)
    service = RateLimitService(config.loads(SERVICE_RULES), store)
    service.should_rate_limit(_request("a"))  # loads the script
    before = _evalsha_calls(client)
    codes = [service.should_rate_limit(_request("a", "b", "c")).overall_code for _ in range(3)]
    assert codes == [OK, OVER, OVER]
    assert _evalsha_calls(client) - before == 3
    client.close()


@pytest.mark.redis
async def test_async_redis_runs_one_script_per_request(redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.flushall()
    store = AsyncRedisStore.from_url(
        redis_server.url, clock=ManualClock(ALIGNED), timeout=STORE_TIMEOUT
    )
    service = AsyncRateLimitService(config.loads(SERVICE_RULES), store)
    try:
        await service.should_rate_limit(_request("a"))
        before = _evalsha_calls(client)
        for _ in range(3):
            await service.should_rate_limit(_request("a", "b", "c"))
        assert _evalsha_calls(client) - before == 3
    finally:
        await store.aclose()
        client.close()
