"""TokenBudget / AsyncTokenBudget: several axes per key, reserved and settled atomically.

A budget names its axes and their rates, ``{"requests": "500/minute",
"tokens": "100000/minute"}``; each axis is a GCRA. ``reserve`` charges every
axis its own estimate in one store step, all or nothing; ``settle`` gives back
what was not used (or charges an overrun), once per reservation id. Each
operation is a flow of ``_BudgetBase`` (``_plan``) through the budget's limiter
(``apply_flow``); the two classes are its blocking and asyncio shells.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ratewarden.budgets._plan import _BudgetBase
from ratewarden.budgets._values import (
    AxisState,
    BudgetDecision,
    Charge,
    Reservation,
    Settlement,
    Usage,
)
from ratewarden.limiter import AsyncLimiter, Limiter
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage import AsyncStore, Store

__all__ = [
    "AsyncTokenBudget",
    "AxisState",
    "BudgetDecision",
    "Charge",
    "Reservation",
    "Settlement",
    "TokenBudget",
    "Usage",
]


class TokenBudget(_BudgetBase):
    """Token budgets on a synchronous store (``MemoryStore`` or ``RedisStore``).

    ::

        budget = TokenBudget(store, {"requests": "500/minute", "tokens": "100000/minute"},
                             max_output_tokens=4096)
        reservation = budget.reserve("tenant:acme", input_tokens=1200)
        if reservation:
            ...  # call the model
            budget.settle(reservation, output_tokens=350)

    Every store step goes through ``limiter``, a ``Limiter(store)`` made here.
    """

    def __init__(
        self,
        store: Store,
        limits: Mapping[str, Rate | str],
        *,
        max_output_tokens: int,
        reservation_ttl: float = 600.0,
    ) -> None:
        self.limiter = Limiter(store)
        self.store: Store = store
        super().__init__(
            self.limiter,
            limits,
            max_output_tokens=max_output_tokens,
            reservation_ttl=reservation_ttl,
        )

    def reserve(
        self,
        key: str,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
    ) -> Reservation:
        """Charge the estimate (input + capped output, one request) on every axis, or nothing.

        Reserving again under the same ``reservation_id`` charges nothing
        (``replayed``). Raises ``StorageUnavailableError`` when the store fails.
        """
        usage = self.estimate(input_tokens, max_output_tokens, units)
        return self.limiter.run(self._reserve_flow(key, usage, reservation_id))

    def reserve_usage(
        self, key: str, usage: Usage, *, reservation_id: str | None = None
    ) -> Reservation:
        """``reserve`` with an explicit ``Usage`` (no output cap applied)."""
        return self.limiter.run(self._reserve_flow(key, usage, reservation_id))

    def settle(
        self,
        reservation: Reservation,
        *,
        output_tokens: int,
        input_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Settlement:
        """Apply the actual usage: refund what was reserved and not used, once per id.

        ``input_tokens`` defaults to the estimate's. A denied reservation has
        nothing to settle (``"unknown"``).
        """
        actual = self._actual(reservation, input_tokens, output_tokens, units)
        return self.limiter.run(self._settle_flow(reservation, actual))

    def settle_usage(self, reservation: Reservation, actual: Usage) -> Settlement:
        """``settle`` with an explicit ``Usage``."""
        return self.limiter.run(self._settle_flow(reservation, actual))

    def settle_id(self, key: str, reservation_id: str, actual: Usage) -> Settlement:
        """Settle by key and id alone: from another process, or after a restart.

        The store's record holds what was charged, so nothing else is needed.
        """
        return self.limiter.run(self._settle_id_flow(key, reservation_id, actual))

    def cancel(self, reservation: Reservation) -> Settlement:
        """Give the whole reservation back (the request was never sent)."""
        return self.limiter.run(self._settle_flow(reservation, self._nothing(reservation)))

    def charge(self, key: str, usage: Usage) -> Charge:
        """Record usage that already happened, with no reservation, up to an empty budget.

        For callers that learn the cost only afterwards (Envoy's charge on stream done).
        """
        return self.limiter.run(self._charge_flow(key, usage))

    def peek(self, key: str) -> BudgetDecision:
        """Every axis of ``key`` now, charging nothing."""
        return self.limiter.run(self._peek_flow(key))


class AsyncTokenBudget(_BudgetBase):
    """The asyncio twin of ``TokenBudget`` over ``AsyncMemoryStore`` or ``AsyncRedisStore``."""

    def __init__(
        self,
        store: AsyncStore,
        limits: Mapping[str, Rate | str],
        *,
        max_output_tokens: int,
        reservation_ttl: float = 600.0,
    ) -> None:
        self.limiter = AsyncLimiter(store)
        self.store: AsyncStore = store
        super().__init__(
            self.limiter,
            limits,
            max_output_tokens=max_output_tokens,
            reservation_ttl=reservation_ttl,
        )

    async def reserve(
        self,
        key: str,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
    ) -> Reservation:
        """See ``TokenBudget.reserve``."""
        usage = self.estimate(input_tokens, max_output_tokens, units)
        return await self.limiter.run(self._reserve_flow(key, usage, reservation_id))

    async def reserve_usage(
        self, key: str, usage: Usage, *, reservation_id: str | None = None
    ) -> Reservation:
        """See ``TokenBudget.reserve_usage``."""
        return await self.limiter.run(self._reserve_flow(key, usage, reservation_id))

    async def settle(
        self,
        reservation: Reservation,
        *,
        output_tokens: int,
        input_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Settlement:
        """See ``TokenBudget.settle``."""
        actual = self._actual(reservation, input_tokens, output_tokens, units)
        return await self.limiter.run(self._settle_flow(reservation, actual))

    async def settle_usage(self, reservation: Reservation, actual: Usage) -> Settlement:
        """See ``TokenBudget.settle_usage``."""
        return await self.limiter.run(self._settle_flow(reservation, actual))

    async def settle_id(self, key: str, reservation_id: str, actual: Usage) -> Settlement:
        """See ``TokenBudget.settle_id``."""
        return await self.limiter.run(self._settle_id_flow(key, reservation_id, actual))

    async def cancel(self, reservation: Reservation) -> Settlement:
        """See ``TokenBudget.cancel``."""
        return await self.limiter.run(self._settle_flow(reservation, self._nothing(reservation)))

    async def charge(self, key: str, usage: Usage) -> Charge:
        """See ``TokenBudget.charge``."""
        return await self.limiter.run(self._charge_flow(key, usage))

    async def peek(self, key: str) -> BudgetDecision:
        """See ``TokenBudget.peek``."""
        return await self.limiter.run(self._peek_flow(key))
