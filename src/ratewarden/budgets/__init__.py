"""LLM token budgets and capacity protection.

- ``TokenBudget`` / ``AsyncTokenBudget``: requests, tokens, input and output
  tokens (or any named unit) per key, reserved and settled atomically.
"""

from __future__ import annotations

from ratewarden.budgets._budget import (
    AsyncTokenBudget,
    AxisState,
    BudgetDecision,
    Reservation,
    Settlement,
    TokenBudget,
    Usage,
)

__all__ = [
    "AsyncTokenBudget",
    "AxisState",
    "BudgetDecision",
    "Reservation",
    "Settlement",
    "TokenBudget",
    "Usage",
]
