"""Moved: the Envoy adapter for token budgets is ``ratewarden.server.budget_service``.

``BudgetRateLimitService``, ``RuleBudgets`` and ``AsyncRuleBudgets`` still
resolve here, with a ``DeprecationWarning``, for one release (docs/reference.md
says so). They are looked up only when asked (``ratewarden.deprecation.moved``):
``budgets`` sits below ``server`` and imports nothing from it otherwise.
"""

from __future__ import annotations

from ratewarden.deprecation import moved

__all__: list[str] = []

# The names this module used to hold, and where they live now.
__getattr__ = moved(
    __name__,
    dict.fromkeys(
        ("AsyncRuleBudgets", "BudgetRateLimitService", "RuleBudgets"),
        "ratewarden.server.budget_service",
    ),
)
