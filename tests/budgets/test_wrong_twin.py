"""A blocking shell given an asyncio limiter or budget (or the reverse), or something that is
neither, is refused when it is built or called, before anything is charged, with a message
naming the shell, what it was given and the twin to use."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import (
    Account,
    AsyncBudgetRouter,
    AsyncFleetShedder,
    AsyncTokenBudget,
    BudgetRouter,
    FleetShedder,
    TokenBudget,
    aheld_slot,
    held_slot,
)
from ratewarden.storage.memory import AsyncMemoryStore

LIMITS = {"tokens": "1000/minute"}


def _blocking() -> TokenBudget:
    return TokenBudget(MemoryStore(), LIMITS, max_output_tokens=100)


def _awaited() -> AsyncTokenBudget:
    return AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=100)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: BudgetRouter(Account("t", _awaited(), "a"), [Account("u", _blocking(), "b")]),
            "BudgetRouter: the budget of account 't' is an AsyncTokenBudget; BudgetRouter drives "
            "TokenBudget budgets: give it TokenBudget budgets, or use AsyncBudgetRouter",
        ),
        (
            lambda: AsyncBudgetRouter(None, [Account("u", _blocking(), "b")]),
            "AsyncBudgetRouter: the budget of account 'u' is a TokenBudget; AsyncBudgetRouter "
            "drives AsyncTokenBudget budgets",
        ),
        (
            lambda: Account("p", "nope", "a"),
            "Account 'p': budget is a str, not a TokenBudget or an AsyncTokenBudget",
        ),
        (lambda: Account("", _blocking(), "a"), "Account name '' must be a non-empty string"),
        (lambda: Account("p", _blocking(), 5), "Account 'p': key 5 must be a non-empty string"),
        (
            lambda: FleetShedder(AsyncLimiter(), "api", 10),
            "FleetShedder: limiter is an AsyncLimiter, an asyncio limiter; FleetShedder needs a "
            "Limiter: give a Limiter, or use AsyncFleetShedder over an AsyncLimiter",
        ),
        (
            lambda: AsyncFleetShedder(Limiter(), "api", 10),
            "AsyncFleetShedder: limiter is a Limiter, a blocking limiter; AsyncFleetShedder "
            "needs an AsyncLimiter",
        ),
        (
            lambda: FleetShedder(MemoryStore(), "api", 10),
            "FleetShedder: limiter is a MemoryStore, not a limiter; give a Limiter",
        ),
    ],
    ids=[
        "router-async-budget",
        "async-router-blocking-budget",
        "account-budget",
        "account-name",
        "account-key",
        "shedder-async-limiter",
        "async-shedder-limiter",
        "shedder-store",
    ],
)
def test_a_router_account_or_shedder_of_the_wrong_twin_is_refused_when_built(
    build: Callable[[], Any], expected: str
) -> None:
    """Before: an AttributeError on a coroutine, a TypeError at an await, or a FleetShedder
    whose acquire handed back an un-awaited coroutine."""
    with pytest.raises(ConfigurationError) as caught:
        build()
    assert expected in str(caught.value)


def test_held_slot_over_an_asyncio_limiter_is_refused_before_a_slot_is_taken() -> None:
    """held_slot needs a Limiter; nothing is acquired."""
    limiter = AsyncLimiter()
    with (
        pytest.raises(ConfigurationError, match="use aheld_slot \\(async with\\) over an"),
        held_slot(limiter, "gpu", 1),  # type: ignore[arg-type]
    ):
        pass


def test_aheld_slot_over_a_blocking_limiter_is_refused_before_a_slot_is_taken() -> None:
    """aheld_slot needs an AsyncLimiter; the blocking limiter's slot stays free."""
    limiter = Limiter()

    async def hold() -> None:
        async with aheld_slot(limiter, "gpu", 1):  # type: ignore[arg-type]
            pass

    with pytest.raises(ConfigurationError, match="aheld_slot: limiter is a Limiter, a blocking"):
        asyncio.run(hold())
    lease = limiter.acquire_slot("gpu", 1)
    assert lease.allowed and lease.decision.remaining == 0
