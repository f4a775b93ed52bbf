"""Moved: the Envoy adapter for token budgets is ``ratewarden.server.budget_service``.

``BudgetRateLimitService``, ``RuleBudgets`` and ``AsyncRuleBudgets`` still
resolve here, with a ``DeprecationWarning``, for one release (docs/reference.md
says so). They are looked up only when asked (a module ``__getattr__``):
``budgets`` sits below ``server`` and imports nothing from it otherwise.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__: list[str] = []

# The names this module used to hold, and where they live now.
_MOVED = {
    "AsyncRuleBudgets": "ratewarden.server.budget_service",
    "BudgetRateLimitService": "ratewarden.server.budget_service",
    "RuleBudgets": "ratewarden.server.budget_service",
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"ratewarden.budgets.envoy.{name} is deprecated; import {name} from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
