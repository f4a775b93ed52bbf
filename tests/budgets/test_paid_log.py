"""``ratewarden serve``'s budgets log what a replay paid, counting keys in words that read."""

from __future__ import annotations

import asyncio
import logging

import pytest

from ratewarden import AsyncMemoryStore, Rate
from ratewarden.server.rule_budgets import AsyncRuleBudgets


def test_one_key_paid_is_one_key(caplog: pytest.LogCaptureFixture) -> None:
    """The log said 'owed by 1 keys'; two keys paid still read 'owed by 2 keys'."""
    budgets = AsyncRuleBudgets(AsyncMemoryStore())
    rate = Rate.parse("1000/minute")

    async def pay(keys: list[str]) -> None:
        for key in keys:
            assert budgets.owe(rate, key, 100)
        await budgets.pay_owed()

    with caplog.at_level(logging.INFO, logger="ratewarden"):
        asyncio.run(pay(["acme"]))
        asyncio.run(pay(["acme", "ref"]))
    assert "paid the budget tokens owed by 1 key (0 keys, 0 tokens still owed)" in caplog.text
    assert "paid the budget tokens owed by 2 keys (0 keys, 0 tokens still owed)" in caplog.text
