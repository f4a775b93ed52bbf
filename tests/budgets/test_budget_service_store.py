"""BudgetRateLimitService refuses a store it cannot await under its own name.

Before, the budget it builds refused the store, and the error named an internal class
("AsyncLimiter: store is a MemoryStore, ...") the caller never made.
"""

from __future__ import annotations

import pytest

from ratewarden import AsyncMemoryStore, ConfigurationError, MemoryStore
from ratewarden.server.budget_service import BudgetRateLimitService
from ratewarden.testing import ManualClock


def _build(store: object) -> BudgetRateLimitService:
    return BudgetRateLimitService(store, domain="llm", descriptor_key="tenant", rate="100/minute")  # type: ignore[arg-type]


def test_a_blocking_store_is_refused_naming_the_service_and_the_store() -> None:
    """MemoryStore (blocking): the error names BudgetRateLimitService, the store's type and
    the asyncio stores to give instead; never AsyncLimiter."""
    with pytest.raises(ConfigurationError) as caught:
        _build(MemoryStore())
    message = str(caught.value)
    assert message.startswith("BudgetRateLimitService: store is a MemoryStore, a blocking store")
    assert "AsyncMemoryStore()" in message and "AsyncLimiter" not in message


def test_something_that_is_not_a_store_is_refused_by_its_type_only() -> None:
    """A URL given for a store: refused as a str, its password not shown."""
    with pytest.raises(ConfigurationError) as caught:
        _build("redis://user:secret@127.0.0.1:6379/0")
    message = str(caught.value)
    assert message.startswith("BudgetRateLimitService: store is a str, not a store")
    assert "secret" not in message and "AsyncLimiter" not in message
    _build(AsyncMemoryStore(clock=ManualClock()))  # an asyncio store is taken
