"""Budget tokens charged through the Envoy service while Redis is down are charged once it is back.

A ``budget`` rule's charge (hits > 0, Envoy's ``apply_on_stream_done``) that the store
cannot take is answered by the rule's ``failure_mode``, as before, and now also owed:
the first charges reach the store and fail (owed in the budget's backlog), the later
ones are refused by the open circuit without reaching it (owed by the service). Once
the store is back, the key's next check pays them first, and ``ratewarden serve``'s
health check pays every key owed. A real redis-server behind the fault proxy; the
stores run on a ManualClock, so no token comes back while a test runs.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.errors import StorageUnavailableError
from ratewarden.limiter import CircuitBreaker
from ratewarden.server import config
from ratewarden.server.budget_service import BudgetRateLimitService
from ratewarden.server.service import RateLimitService
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._proxy import Fault, FaultProxy
from tests.server.conftest import desc
from tests.server_transport.conftest import StartServer

pytestmark = [pytest.mark.faults, pytest.mark.redis]

OK = rls_pb2.RateLimitResponse.OK
RULES = """\
domain: llm
descriptors:
  - key: tenant
    budget: {unit: minute, tokens_per_unit: 1000, failure_mode: open}
"""


def _ask(domain: str, value: str, hits: int) -> Any:
    return rls_pb2.RateLimitRequest(domain=domain, descriptors=[desc(("tenant", value), hits=hits)])


def test_charges_in_an_outage_are_owed_through_the_breaker_and_paid_by_the_next_check(
    proxied_redis: tuple[RedisServer, FaultProxy],
) -> None:
    """Five charges of 100 while Redis refuses connections: the first two reach the store
    (the breaker opens after two failures), the other three do not. All 500 are owed, and
    the first check after the outage pays them. They are charged when paid, not when spent:
    tenant ``ref``, whose six charges of 100 were all made before the outage, has regained
    516 tokens in the 31 s since; ``acme`` regained its one charge, then paid 500."""
    _, proxy = proxied_redis
    clock = ManualClock()
    store = RedisStore.from_url(proxy.url, clock=clock, timeout=5.0)
    breaker = CircuitBreaker(failures=2, failure_ratio=None, cooldown=30.0, clock=clock)
    service = RateLimitService(config.loads(RULES), store, breaker=breaker)
    try:
        for _ in range(6):
            assert service.should_rate_limit(_ask("llm", "ref", 100)).overall_code == OK
        assert service.should_rate_limit(_ask("llm", "acme", 100)).overall_code == OK
        proxy.set_fault(Fault.RESET)
        for _ in range(5):  # failure_mode open: each answered OK, none charged
            assert service.should_rate_limit(_ask("llm", "acme", 100)).overall_code == OK
        assert breaker.state == "open"
        assert service.budgets.owed() == (1, 500)
        proxy.set_fault(Fault.NONE)
        clock.advance(31.0)  # past the breaker's cool-down; 516 tokens are back by now
        left = {}
        for tenant in ("acme", "ref"):
            status = service.should_rate_limit(_ask("llm", tenant, 0)).statuses[0]
            assert status.code == OK
            left[tenant] = status.limit_remaining
        assert left == {"acme": 1000 - 500, "ref": 1000 - 600 + 516}
        assert service.budgets.owed() == (0, 0)
    finally:
        store.close()


async def test_serve_pays_what_is_owed_when_its_health_check_finds_the_store_back(
    proxied_redis: tuple[RedisServer, FaultProxy],
    start_server: StartServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, proxy = proxied_redis
    store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=5.0)
    server = await start_server(RULES, store=store, health_interval=3600)
    proxy.set_fault(Fault.RESET)
    for tenant, tokens in (("a", 100), ("b", 200), ("a", 50)):
        response = await server.should_rate_limit(_ask("llm", tenant, tokens))
        assert response.overall_code == OK  # failure_mode open
    assert server.service.budgets.owed() == (2, 350)
    assert not await server.refresh_health()  # still down: nothing paid, nothing lost
    assert server.service.budgets.owed() == (2, 350)
    proxy.set_fault(Fault.NONE)
    with caplog.at_level(logging.INFO, logger="ratewarden.server"):
        assert await server.refresh_health()
    assert server.service.budgets.owed() == (0, 0)
    assert "paid the budget tokens owed by 2 keys (0 keys, 0 tokens still owed)" in caplog.text
    left = {}
    for tenant in "ab":
        response = await server.should_rate_limit(_ask("llm", tenant, 0))
        left[tenant] = response.statuses[0].limit_remaining
    assert left == {"a": 850, "b": 800}


async def test_serve_stopping_with_tokens_owed_says_so(
    proxied_redis: tuple[RedisServer, FaultProxy],
    start_server: StartServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, proxy = proxied_redis
    store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=5.0)
    server = await start_server(RULES, store=store, health_interval=3600)
    proxy.set_fault(Fault.RESET)
    await server.should_rate_limit(_ask("llm", "acme", 70))
    with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
        await server.stop(grace=0)
    assert "stopping with 70 budget tokens of 1 key never charged" in caplog.text


async def test_the_budget_service_owes_a_charge_it_could_not_make(
    proxied_redis: tuple[RedisServer, FaultProxy],
) -> None:
    """``BudgetRateLimitService`` raises on a store failure (its transport answers with an
    error), and the tokens are charged before the tenant's next call."""
    _, proxy = proxied_redis
    store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=5.0)
    service = BudgetRateLimitService(
        store, domain="llm", descriptor_key="tenant", rate="1000/minute"
    )
    try:
        proxy.set_fault(Fault.RESET)
        with pytest.raises(StorageUnavailableError):
            await service(_ask("llm", "acme", 300))
        proxy.set_fault(Fault.NONE)
        response = await service(_ask("llm", "acme", 0))
        assert response.statuses[0].limit_remaining == 700
    finally:
        await store.aclose()
