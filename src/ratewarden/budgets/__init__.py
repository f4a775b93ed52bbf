"""LLM token budgets and capacity protection.

- ``TokenBudget`` / ``AsyncTokenBudget``: requests, tokens, input and output
  tokens (or any named unit) per key, reserved and settled atomically; with a
  ``Backlog``, usage charged while the store was down is paid once it is back.
- ``BudgetRouter`` / ``AsyncBudgetRouter``: a tenant's budget and the first
  upstream ``Account`` with room, in one call that never leaks a reservation.
- ``FairShare`` / ``AsyncFairShare``: weighted tenants sharing a pooled budget, hit
  or reserved (``FairReservation``) and settled.
- ``held_slot`` / ``aheld_slot``: a concurrency slot renewed while long work runs.
- ``LoadShedder`` and ``FleetShedder`` / ``AsyncFleetShedder``: traffic classes
  shed lowest first as utilization rises, with a reserve for critical traffic; a
  fleet shedder's ``acquire`` answers a ``ShedAcquired`` (decision, lease).
- ``steps_flow`` over ``BudgetStep``s: several budgets' charges and peeks in as few
  store steps as the store allows, each answered as its own call would be.
- ``provider_headers``: ``x-ratelimit-*-requests`` / ``-tokens`` and the IETF fields.

``ratewarden.server.budget_service`` (it needs the ``server`` extra) answers Envoy's
rate limit protocol for token budgets; ``ratewarden.budgets.envoy``, its old name,
still resolves with a DeprecationWarning for one release. See docs/budgets.md.
"""

from __future__ import annotations

from ratewarden.budgets._backlog import Backlog
from ratewarden.budgets._budget import AsyncTokenBudget, TokenBudget
from ratewarden.budgets._fair import AsyncFairShare, FairDecision, FairReservation, FairShare
from ratewarden.budgets._headers import format_duration, provider_headers
from ratewarden.budgets._routing import Account, AsyncBudgetRouter, BudgetRouter, Route
from ratewarden.budgets._shedder import (
    DEFAULT_POLICY,
    AsyncFleetShedder,
    FleetShedder,
    LoadShedder,
    ShedAcquired,
    ShedDecision,
    ShedPolicy,
)
from ratewarden.budgets._slots import HeldSlot, aheld_slot, held_slot
from ratewarden.budgets._steps import BudgetStep, steps_flow
from ratewarden.budgets._values import (
    AxisState,
    BudgetDecision,
    Charge,
    Reservation,
    Settlement,
    Usage,
)

__all__ = [
    "DEFAULT_POLICY",
    "Account",
    "AsyncBudgetRouter",
    "AsyncFairShare",
    "AsyncFleetShedder",
    "AsyncTokenBudget",
    "AxisState",
    "Backlog",
    "BudgetDecision",
    "BudgetRouter",
    "BudgetStep",
    "Charge",
    "FairDecision",
    "FairReservation",
    "FairShare",
    "FleetShedder",
    "HeldSlot",
    "LoadShedder",
    "Reservation",
    "Route",
    "Settlement",
    "ShedAcquired",
    "ShedDecision",
    "ShedPolicy",
    "TokenBudget",
    "Usage",
    "aheld_slot",
    "format_duration",
    "held_slot",
    "provider_headers",
    "steps_flow",
]
