"""Per tenant and per upstream: the router picks the first upstream with room and never leaks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import ConfigurationError, StorageUnavailableError
from ratewarden.budgets import Account, AsyncBudgetRouter, BudgetRouter
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import free_port
from tests.budgets.conftest import Harness, settle


def _router(h: Harness, upstream_tokens: tuple[str, ...] = ("1000/minute", "5000/minute")) -> Any:
    tenants = h.budget({"requests": "100/minute", "tokens": "8000/minute"}, max_output_tokens=500)
    accounts = [
        Account(f"model-{i}", h.budget({"tokens": rate}, max_output_tokens=500), f"up:{i}")
        for i, rate in enumerate(upstream_tokens)
    ]
    cls = AsyncBudgetRouter if h.is_async else BudgetRouter
    return cls(Account("tenant", tenants, "tenant:acme"), accounts), tenants, accounts


async def test_first_upstream_with_room_in_preference_order(stores: Callable[..., Harness]) -> None:
    """A full first upstream is skipped (and not charged); the second one is reserved."""
    h = stores()
    router, tenants, accounts = _router(h)
    first = await settle(router.reserve(input_tokens=300))
    assert first and first.upstream == "model-0"
    second = await settle(router.reserve(input_tokens=300))  # 800 > 1000 - 800 left on model-0
    assert second and second.upstream == "model-1"
    assert (await settle(accounts[0].budget.peek("up:0"))).axis("tokens").remaining == 200
    assert (await settle(tenants.peek("tenant:acme"))).axis("tokens").remaining == 8000 - 1600
    preferred = await settle(router.reserve(input_tokens=10, prefer=["model-1"]))
    assert preferred.upstream == "model-1"


async def test_no_upstream_with_room_refunds_the_tenant_exactly(
    stores: Callable[..., Harness],
) -> None:
    """When every upstream denies, the tenant's reservation is cancelled: no tokens leak."""
    h = stores()
    router, tenants, _ = _router(h, ("600/minute", "700/minute"))
    before = await settle(tenants.peek("tenant:acme"))
    route = await settle(router.reserve(input_tokens=400))  # 900 fits neither upstream
    assert not route and route.denied_by == "upstreams"
    assert route.retry_after == float("inf")
    after = await settle(tenants.peek("tenant:acme"))
    assert [a.remaining for a in after.axes] == [a.remaining for a in before.axes]


async def test_tenant_denial_touches_no_upstream(stores: Callable[..., Harness]) -> None:
    """A tenant over its budget is denied before any upstream is charged."""
    h = stores()
    router, _, accounts = _router(h)
    route = await settle(router.reserve(input_tokens=9000))
    assert not route and route.denied_by == "tenant" and route.reservation is None
    assert (await settle(accounts[0].budget.peek("up:0"))).axis("tokens").remaining == 1000


async def test_settle_route_refunds_tenant_and_upstream(stores: Callable[..., Harness]) -> None:
    """Settling a route applies the actual usage to both reservations, once."""
    h = stores()
    router, tenants, accounts = _router(h)
    route = await settle(router.reserve(input_tokens=300))
    done = await settle(router.settle(route, output_tokens=20))
    assert [s.refunded["tokens"] for s in done] == [480, 480]
    assert (await settle(tenants.peek("tenant:acme"))).axis("tokens").remaining == 8000 - 320
    assert (await settle(accounts[0].budget.peek("up:0"))).axis("tokens").remaining == 680
    again = await settle(router.settle(route, output_tokens=20))
    assert [s.status for s in again] == ["already-settled", "already-settled"]


async def test_an_upstream_store_failure_refunds_the_tenant_and_raises(
    stores: Callable[..., Harness],
) -> None:
    """An upstream whose store is down raises StorageUnavailableError; the tenant is refunded."""
    h = stores()
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    dead: Any = (AsyncRedisStore if h.is_async else RedisStore).from_url(url, timeout=0.2)
    tenants = h.budget({"tokens": "8000/minute"}, max_output_tokens=500)
    down = type(tenants)(dead, {"tokens": "1000/minute"}, max_output_tokens=500)
    cls = AsyncBudgetRouter if h.is_async else BudgetRouter
    router = cls(Account("tenant", tenants, "t"), [Account("down", down, "d")])
    with pytest.raises(StorageUnavailableError):
        await settle(router.reserve(input_tokens=100))
    assert (await settle(tenants.peek("t"))).axis("tokens").remaining == 8000
    await settle(dead.aclose() if h.is_async else dead.close())


def test_router_configuration_errors() -> None:
    """Bad accounts, repeated names and unknown preferences are ConfigurationErrors."""
    from ratewarden import MemoryStore
    from ratewarden.budgets import TokenBudget

    budget = TokenBudget(MemoryStore(), {"tokens": "10/second"}, max_output_tokens=1)
    one = Account("a", budget, "a")
    for bad in ([], ["a"], [one, one]):
        with pytest.raises(ConfigurationError):
            BudgetRouter(None, bad)
    router = BudgetRouter(None, [one])
    with pytest.raises(ConfigurationError):
        router.reserve(input_tokens=1, prefer=["b"])
    assert router.reserve(input_tokens=1).upstream == "a"
