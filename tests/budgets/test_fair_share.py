"""Fair shares of a pooled budget: weights split a saturated pool, idle shares are reused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import ConfigurationError, MemoryStore
from ratewarden.budgets import AsyncFairShare, FairShare
from tests.budgets.conftest import Harness, settle

POOL = "60000/minute"  # 1,000 tokens a second
COST = 100
STEP_S = 0.1


def _fair(h: Harness, **options: Any) -> Any:
    cls = AsyncFairShare if h.is_async else FairShare
    return cls(h.store, POOL, {"interactive": 3, "batch": 1}, **options)


async def _run(h: Harness, fair: Any, tenants: list[str], seconds: float) -> dict[str, int]:
    """Every tenant sends requests until denied, interleaved, every STEP_S; tokens admitted."""
    admitted = dict.fromkeys(tenants, 0)
    for step in range(round(seconds / STEP_S)):
        order = tenants if step % 2 == 0 else tenants[::-1]
        wanting = set(order)
        for _ in range(1000):  # bounded: a rested pool admits 600 requests at most
            if not wanting:
                break
            for tenant in order:
                if tenant in wanting:
                    decision = await settle(fair.hit("gpu", tenant, COST))
                    if decision:
                        admitted[tenant] += COST
                    else:
                        wanting.discard(tenant)
        h.clock.advance(STEP_S)
    return admitted


async def test_weights_3_to_1_split_a_saturated_pool_and_an_idle_share_is_reused(
    stores: Callable[..., Harness],
) -> None:
    """3:1 (+-10%) over a minute from rest; when one stops the other gets the whole pool."""
    h = stores()
    fair = _fair(h, active_window=5.0)
    first = await _run(h, fair, ["interactive", "batch"], 60)
    ratio = first["interactive"] / first["batch"]
    assert 2.7 <= ratio <= 3.3, first
    assert sum(first.values()) <= 60_000 + 60_000  # the pool's burst plus a minute of rate
    assert sum(first.values()) >= 0.95 * 120_000  # and the pool was used, not wasted
    stopped = await _run(h, fair, ["batch"], 30)  # the first 30 s after interactive stopped
    later = await _run(h, fair, ["batch"], 30)
    assert stopped["batch"] > 30 * 250 * 1.5  # well above its old quarter share already
    assert 0.95 * 30_000 <= later["batch"] <= 30_000 + COST  # the whole pool, within a window


async def test_a_newcomer_gets_its_share_of_a_pool_another_tenant_filled(
    stores: Callable[..., Harness],
) -> None:
    """A tenant arriving at a full pool gets weight/total of it from then on (+-10%)."""
    h = stores()
    fair = _fair(h)
    await _run(h, fair, ["batch"], 10)
    after = await _run(h, fair, ["batch", "interactive"], 60)
    assert 2.7 <= after["interactive"] / after["batch"] <= 3.3, after


async def test_decision_reports_share_and_charge(stores: Callable[..., Harness]) -> None:
    """The decision says the tenant's current share and what its bucket was charged."""
    h = stores()
    fair = _fair(h)
    alone = await settle(fair.hit("gpu", "batch", 100))
    assert (alone.share, alone.charged, alone.active_weight) == (1.0, 100, 1)
    both = await settle(fair.hit("gpu", "interactive", 100))
    assert (both.share, both.charged, both.active_weight) == (0.75, 134, 4)
    never = await settle(fair.hit("gpu", "batch", 20_000))  # 4 x 20,000 > the pool's capacity
    assert not never and never.retry_after == float("inf")


def test_fair_share_configuration_errors() -> None:
    """Bad pools, weights, windows, tenants and costs are ConfigurationErrors."""
    store = MemoryStore()
    for pool, weights, options in (
        ("lots", {"a": 1}, {}),
        (POOL, {"a": 0}, {}),
        (POOL, {"a": True}, {}),
        (POOL, {"": 1}, {}),
        (POOL, ["a"], {}),
        (POOL, {"a": 1}, {"active_window": 0}),
        (POOL, {"a": 1}, {"default_weight": 2_000_000}),
    ):
        with pytest.raises(ConfigurationError):
            FairShare(store, pool, weights, **options)  # type: ignore[arg-type]
    fair = FairShare(store, POOL, {"a": 1})
    for tenant, cost in (("", 1), (None, 1), ("a", -1), ("a", 1.5), ("\ud800", 1)):
        with pytest.raises(ConfigurationError):
            fair.hit("gpu", tenant, cost)  # type: ignore[arg-type]
    assert len(store) == 0
