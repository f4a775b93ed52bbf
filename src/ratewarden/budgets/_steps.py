"""Several budgets' charges and peeks decided together: ``BudgetStep`` and ``steps_flow``.

A caller with many budget calls at once (``ratewarden serve``'s budget descriptors of one
request) plans them all and hands the store their ops in as few store steps as it allows
(``apply_all_flow``: one step in memory, one pipeline on a blocking Redis store, side by
side under asyncio). Each op stays its own atomic step, in the order given, so each answer
is the one that budget's own ``charge`` or ``peek`` would give called in that order. When
a step's key is owed tokens (its budget's ``Backlog``), every step is made by its budget's
own flow, one after the other: paying what is owed is a step of its own, before the key's
peek.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.budgets._plan import _BudgetBase
from ratewarden.budgets._values import BudgetDecision, Charge, Usage
from ratewarden.errors import StorageUnavailableError
from ratewarden.limiter import AsyncLimiter, Flow, Limiter

__all__ = ["BudgetStep", "steps_flow"]


@dataclass(frozen=True, slots=True)
class BudgetStep:
    """One budget call: ``budget.charge(key, usage)``, or ``budget.peek(key)`` when
    ``usage`` is None."""

    budget: Any  # a TokenBudget or AsyncTokenBudget
    key: str
    usage: Usage | None = None


def steps_flow(
    limiter: Limiter | AsyncLimiter, steps: Sequence[BudgetStep]
) -> Flow[list[Charge | BudgetDecision | Exception]]:
    """Every step's answer (a ``Charge``, a peek's ``BudgetDecision``, or the exception its
    call would raise), the ops run by ``limiter`` (on the budgets' store). A charge the
    store could not take is owed, as ``charge`` owes it."""
    if any(_owes(step) for step in steps):
        return (yield from _one_by_one(steps))
    plans = []
    for step in steps:
        budget: _BudgetBase[Any, Any] = step.budget
        keys = budget._keys(step.key, None)
        if step.usage is None:
            costs = (0,) * len(budget.axes)
            plans.append((costs, budget._op("reserve", keys, costs)))
        else:
            if not isinstance(step.usage, Usage):
                raise TypeError(f"a budget step's usage {step.usage!r} is not a Usage")
            costs = budget._costs(step.usage)
            plans.append((costs, budget._op("charge", keys, costs)))
    replies = yield from limiter.apply_all_flow([op for _, op in plans])
    found: list[Charge | BudgetDecision | Exception] = []
    for step, (costs, _), reply in zip(steps, plans, replies, strict=True):
        budget = step.budget
        if isinstance(reply, Exception):
            owed = isinstance(reply, StorageUnavailableError) and step.usage is not None
            if owed and budget.backlog is not None:
                budget.backlog.owe(step.key, costs)
            found.append(reply)
        elif step.usage is None:
            found.append(budget._decision(reply, 3, costs))
        else:
            m = len(budget.axes)
            charged = {name: reply[2 + i] for i, (name, _) in enumerate(budget.axes)}
            found.append(Charge(charged, budget._decision(reply, 2 + m, (0,) * m)))
    return found


def _owes(step: BudgetStep) -> bool:
    backlog = step.budget.backlog
    return bool(backlog) and backlog.owed(step.key) is not None


def _one_by_one(steps: Sequence[BudgetStep]) -> Flow[list[Charge | BudgetDecision | Exception]]:
    found: list[Charge | BudgetDecision | Exception] = []
    for step in steps:
        try:
            if step.usage is None:
                found.append((yield from step.budget.peek_flow(step.key)))
            else:
                found.append((yield from step.budget.charge_flow(step.key, step.usage)))
        except Exception as error:  # each call's failure is its own answer
            found.append(error)
    return found
