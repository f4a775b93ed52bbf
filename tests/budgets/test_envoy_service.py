"""The budget service's answers to RateLimitRequests, without Envoy in the way."""

from __future__ import annotations

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden import AsyncMemoryStore, ConfigurationError
from ratewarden.server.budget_service import BudgetRateLimitService
from ratewarden.testing import ManualClock

Response = rls_pb2.RateLimitResponse


def _request(hits: int | None, tenant: str = "acme", domain: str = "llm") -> object:
    request = rls_pb2.RateLimitRequest(domain=domain)
    descriptor = request.descriptors.add()
    entry = descriptor.entries.add()
    entry.key, entry.value = "tenant", tenant
    if hits is not None:
        descriptor.hits_addend.value = hits
    return request


async def test_check_then_charge_then_over_limit_with_status_fields() -> None:
    """hits 0 checks, hits N charges up to empty; an empty budget is OVER_LIMIT on the check."""
    service = BudgetRateLimitService(
        AsyncMemoryStore(clock=ManualClock()),
        domain="llm",
        descriptor_key="tenant",
        rate="1000/minute",
    )
    ok = await service(_request(0))
    assert ok.overall_code == Response.OK and ok.statuses[0].limit_remaining == 1000
    charged = await service(_request(1500))
    status = charged.statuses[0]
    assert charged.overall_code == Response.OK and status.limit_remaining == 0
    assert status.current_limit.requests_per_unit == 1000
    assert status.current_limit.unit == Response.RateLimit.MINUTE
    assert status.duration_until_reset.seconds == 60
    over = await service(_request(0))
    assert over.overall_code == Response.OVER_LIMIT
    other = await service(_request(0, tenant="other"))
    assert other.overall_code == Response.OK
    unrelated = rls_pb2.RateLimitRequest(domain="llm")
    unrelated.descriptors.add().entries.add(key="path", value="/x")
    assert (await service(unrelated)).statuses[0].code == Response.OK


async def test_configuration_errors() -> None:
    """Another domain, an empty key, or a rate Envoy has no unit for are ConfigurationErrors."""
    store = AsyncMemoryStore()
    service = BudgetRateLimitService(store, domain="llm", descriptor_key="tenant", rate="10/s")
    with pytest.raises(ConfigurationError):
        await service(_request(0, domain="other"))
    for options in (
        {"domain": "", "descriptor_key": "tenant", "rate": "10/s"},
        {"domain": "llm", "descriptor_key": "", "rate": "10/s"},
        {"domain": "llm", "descriptor_key": "tenant", "rate": "10/5m"},
    ):
        with pytest.raises(ConfigurationError):
            BudgetRateLimitService(store, **options)  # type: ignore[arg-type]


def test_the_old_module_path_still_imports_with_a_deprecation_warning() -> None:
    """ratewarden.budgets.envoy (moved to ratewarden.server.budget_service) resolves each of
    its names to the new home's object, warning that the old name is going; others raise."""
    from ratewarden.budgets import envoy
    from ratewarden.server import budget_service

    for name in ("BudgetRateLimitService", "RuleBudgets", "AsyncRuleBudgets"):
        with pytest.warns(
            DeprecationWarning, match=f"import {name} from {budget_service.__name__}"
        ):
            assert getattr(envoy, name) is getattr(budget_service, name)
    with pytest.raises(AttributeError, match="no attribute 'Elsewhere'"):
        envoy.Elsewhere  # noqa: B018


async def test_an_over_check_says_when_the_next_token_is_back() -> None:
    """30/minute spent: an over check's duration_until_reset is the 2 s until one token is
    back (as serve's budget rules answer), not the 60 s until the budget is full; an OK
    status still gives the time until full."""
    clock = ManualClock()
    service = BudgetRateLimitService(
        AsyncMemoryStore(clock=clock), domain="llm", descriptor_key="tenant", rate="30/minute"
    )
    charged = await service(_request(30))
    assert charged.statuses[0].duration_until_reset.seconds == 60
    over = await service(_request(0))
    assert over.overall_code == Response.OVER_LIMIT
    assert over.statuses[0].duration_until_reset.seconds == 2
    clock.advance(2.0)
    assert (await service(_request(0))).overall_code == Response.OK
