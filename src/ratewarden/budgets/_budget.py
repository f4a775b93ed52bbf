"""TokenBudget / AsyncTokenBudget: several axes per key, reserved and settled atomically.

A budget names its axes and their rates, ``{"requests": "500/minute",
"tokens": "100000/minute"}``; each axis is a GCRA. ``reserve`` charges every
axis its own estimate in one store step, all or nothing; ``settle`` gives back
what was not used (or charges an overrun), once per reservation id. Each
operation is a flow of ``_BudgetBase`` (``_plan``) through the budget's limiter
(``apply_flow``); the two classes are its blocking and asyncio shells, each
method made from its flow (``blocking`` / ``awaiting``). The asyncio ``reserve``
takes back, by id, a reservation its store may have made when the call is
cancelled (``_undone_if_cancelled``).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from ratewarden.budgets._plan import _BudgetBase
from ratewarden.budgets._twins import undo_cancelled
from ratewarden.budgets._values import Reservation
from ratewarden.limiter import AsyncLimiter, Flow, Limiter, awaiting, blocking

if TYPE_CHECKING:
    # Named as strings in the shells' bases (types only: budgets import no store).
    from ratewarden.storage import AsyncStore, Store  # noqa: F401

__all__ = ["AsyncTokenBudget", "TokenBudget"]

P = ParamSpec("P")


def _undone_if_cancelled(
    flow: Callable[Concatenate[Any, P], Flow[Reservation]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, Reservation]]:
    """``awaiting(flow)`` for a reserve: its id is chosen before the call (a random one when
    none is given), so that a call cancelled while the store may be running its script
    (``wait_for``, a client gone) cancels the reservation by that id instead of leaving it
    charged with nobody holding it."""
    run = awaiting(flow)

    @functools.wraps(run)
    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Reservation:
        rid = kwargs.get("reservation_id")
        if rid is None:
            rid = kwargs["reservation_id"] = uuid.uuid4().hex
        try:
            return await run(self, *args, **kwargs)
        except asyncio.CancelledError:
            key = args[0] if args else kwargs.get("key")
            undo = self.settle_id(key, rid, self._unused())
            await undo_cancelled(f"reservation {rid!r} of {key!r}", undo)
            raise

    return method


class TokenBudget(_BudgetBase["Store", Limiter]):
    """Token budgets on a synchronous store (``MemoryStore`` or ``RedisStore``).

    ::

        budget = TokenBudget(store, {"requests": "500/minute", "tokens": "100000/minute"},
                             max_output_tokens=4096)
        reservation = budget.reserve("tenant:acme", input_tokens=1200)
        if reservation:
            ...  # call the model
            budget.settle(reservation, output_tokens=350)

    Every store step goes through ``limiter``, a ``Limiter(store)`` made here. With
    ``backlog=Backlog()``, usage a ``charge`` (or a settle's overrun) could not record
    while the store was down is paid before the key's next store step, or by ``replay()``.
    Each method is also a flow (``reserve_flow``, ...) to compose with ``yield from``.
    """

    _driver = Limiter
    reserve = blocking(_BudgetBase.reserve_flow)
    reserve_usage = blocking(_BudgetBase.reserve_usage_flow)
    settle = blocking(_BudgetBase.settle_flow)
    settle_usage = blocking(_BudgetBase.settle_usage_flow)
    settle_id = blocking(_BudgetBase.settle_id_flow)
    cancel = blocking(_BudgetBase.cancel_flow)
    charge = blocking(_BudgetBase.charge_flow)
    peek = blocking(_BudgetBase.peek_flow)
    replay = blocking(_BudgetBase.replay_flow)
    _holds = blocking(_BudgetBase.holds_flow)


class AsyncTokenBudget(_BudgetBase["AsyncStore", AsyncLimiter]):
    """The asyncio twin of ``TokenBudget`` over ``AsyncMemoryStore`` or ``AsyncRedisStore``.

    A ``reserve`` cancelled after it may have reached the store cancels the reservation
    by its id before the ``CancelledError`` goes on (waiting at most ``UNDO_WAIT``
    seconds for the store): do not reuse the id of a reservation you still hold.
    """

    _driver = AsyncLimiter
    reserve = _undone_if_cancelled(_BudgetBase.reserve_flow)
    reserve_usage = _undone_if_cancelled(_BudgetBase.reserve_usage_flow)
    settle = awaiting(_BudgetBase.settle_flow)
    settle_usage = awaiting(_BudgetBase.settle_usage_flow)
    settle_id = awaiting(_BudgetBase.settle_id_flow)
    cancel = awaiting(_BudgetBase.cancel_flow)
    charge = awaiting(_BudgetBase.charge_flow)
    peek = awaiting(_BudgetBase.peek_flow)
    replay = awaiting(_BudgetBase.replay_flow)
    _holds = awaiting(_BudgetBase.holds_flow)
