"""Bad input to a budget, a fair share or a shedder is a ConfigurationError naming what and
where, raised when the object is built or the call made, before anything is charged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ratewarden import AsyncMemoryStore, ConfigurationError, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, TokenBudget

LIMITS = {"requests": "10/minute", "tokens": "10000/minute"}


def _run(value: Any) -> Any:
    return asyncio.run(value) if asyncio.iscoroutine(value) else value


@pytest.mark.parametrize("make", [TokenBudget, AsyncTokenBudget], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("given", [None, "req-1", 5])
def test_cancel_of_anything_but_a_reservation_says_so(make: Any, given: Any) -> None:
    """cancel(None) raised AttributeError: 'NoneType' object has no attribute 'estimate'."""
    store = AsyncMemoryStore() if make is AsyncTokenBudget else MemoryStore()
    budget = make(store, LIMITS, max_output_tokens=100)
    with pytest.raises(ConfigurationError, match="cancel needs the Reservation that reserve"):
        _run(budget.cancel(given))
