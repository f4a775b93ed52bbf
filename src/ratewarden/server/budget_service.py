"""Token budgets through Envoy's standard rate limit protocol, without a custom RPC.

Envoy's HTTP rate limit filter can ask twice per request with the same
descriptor: on the request path with ``hits_addend: {number: 0}`` (check only)
and, with ``apply_on_stream_done: true``, once the response is complete, with
``hits_addend`` taken from the response (``%RESP(x-tokens-used)%``: the token
count the upstream reports). ``BudgetRateLimitService`` answers both:

- **hits 0**: OVER_LIMIT when the tenant's budget has no token left, else OK.
  Nothing is charged.
- **hits N > 0**: the N tokens already happened; they are charged up to an
  empty budget (``TokenBudget.charge``) and the answer, which Envoy ignores on
  this path, is OK.

So a tenant may overrun its budget by at most one response (the request that
was admitted with tokens left), and is then refused until GCRA has given
capacity back. That is weaker than reserve/settle, which holds the estimate
up front; it is what the protocol allows without a custom RPC.

The service is transport-agnostic (a ``RateLimitRequest`` in, a
``RateLimitResponse`` out, like ``ratewarden.server.service``); run it behind
``ratewarden.server.grpc.GrpcServer(answer=service)``. It needs the ``server``
extra (``xds-protos``).

``ratewarden serve`` answers the same way for a descriptor with a ``budget``
in its config (``ratewarden.server.config.budget``): its service decides those
descriptors through its limiter with ``RuleBudgets.check`` / ``account`` (or the
``AsyncRuleBudgets`` twins) in place of the store's ``hit``, which turn the check
or the charge into the ``Decision`` the rest of the service reports.

This module was ``ratewarden.budgets.envoy``; that name still imports, with a
``DeprecationWarning``, for one release. Everything here uses ``TokenBudget``'s
public API only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.budgets import (
    AsyncTokenBudget,
    AxisState,
    BudgetDecision,
    Charge,
    TokenBudget,
    Usage,
)
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage import AsyncStore, Store

__all__ = ["AsyncRuleBudgets", "BudgetRateLimitService", "RuleBudgets"]

_Response = rls_pb2.RateLimitResponse
_UNITS = {
    1_000_000: _Response.RateLimit.SECOND,
    60_000_000: _Response.RateLimit.MINUTE,
    3_600_000_000: _Response.RateLimit.HOUR,
    86_400_000_000: _Response.RateLimit.DAY,
}


class BudgetRateLimitService:
    """``ShouldRateLimit`` for one token budget per value of ``descriptor_key`` in ``domain``.

    ::

        service = BudgetRateLimitService(store, domain="llm", descriptor_key="tenant",
                                         rate="100000/minute")
        server = GrpcServer(service)  # ratewarden.server.grpc

    Descriptors without ``descriptor_key`` are answered OK with no limit.
    """

    def __init__(
        self, store: AsyncStore, *, domain: str, descriptor_key: str, rate: Rate | str
    ) -> None:
        for what, value in (("domain", domain), ("descriptor_key", descriptor_key)):
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"{what} {value!r} must be a non-empty string")
        self.domain = domain
        self.descriptor_key = descriptor_key
        self.budget = AsyncTokenBudget(store, {"tokens": rate}, max_output_tokens=0)
        found = self.budget.axes[0][1]
        unit = _UNITS.get(found.period_us)
        if unit is None:
            raise ConfigurationError(
                f"rate {found} must be per second, minute, hour or day: Envoy's RateLimit "
                "has no other unit to report it in"
            )
        self._unit = unit
        self.rate = found

    async def __call__(self, request: Any) -> Any:
        """Answer one ``RateLimitRequest`` (check on hits 0, charge on hits > 0)."""
        if request.domain != self.domain:
            raise ConfigurationError(
                f"domain {request.domain!r} is not this budget service's {self.domain!r}"
            )
        default_hits = request.hits_addend or 1
        statuses = []
        for descriptor in request.descriptors:
            key = self._budget_key(descriptor)
            if key is None:
                statuses.append(_Response.DescriptorStatus(code=_Response.OK))
                continue
            hits = (
                descriptor.hits_addend.value if descriptor.HasField("hits_addend") else default_hits
            )
            statuses.append(await self._status(key, hits))
        over = any(status.code == _Response.OVER_LIMIT for status in statuses)
        return _Response(
            overall_code=_Response.OVER_LIMIT if over else _Response.OK, statuses=statuses
        )

    def _budget_key(self, descriptor: Any) -> str | None:
        for entry in descriptor.entries:
            if entry.key == self.descriptor_key:
                return f"{self.descriptor_key}={entry.value}"
        return None

    async def _status(self, key: str, hits: int) -> Any:
        if hits == 0:
            decision = await self.budget.peek(key)
            over = decision.axes[0].remaining < 1
        else:
            decision = (await self.budget.charge(key, Usage(0, hits, 0))).decision
            over = False
        return self._describe(decision, over)

    def _describe(self, decision: BudgetDecision, over: bool) -> Any:
        state = decision.axes[0]
        status = _Response.DescriptorStatus(
            code=_Response.OVER_LIMIT if over else _Response.OK,
            current_limit=_Response.RateLimit(requests_per_unit=state.limit, unit=self._unit),
            limit_remaining=state.remaining,
        )
        reset = state.reset_after
        status.duration_until_reset.seconds = 0 if math.isinf(reset) else math.ceil(reset)
        return status

    def __repr__(self) -> str:
        return (
            f"BudgetRateLimitService(domain={self.domain!r}, "
            f"descriptor_key={self.descriptor_key!r}, rate={self.rate})"
        )


# ---------------------------------------------------------------- budget rules of serve

#: Distinct rates whose budget objects are kept (a config has few; Envoy's limit overrides
#: can name any rate, so the table is emptied rather than grown past this).
_MAX_RATES = 1024


def _wait_for_one(state: AxisState) -> float:
    """Seconds until one token is back on an empty axis (GCRA: the state moves one
    emission interval into the burst), never earlier than exact."""
    if not math.isfinite(state.reset_after):
        return math.inf
    n, d = state.rate.reduced  # the emission interval is d / n microseconds
    reset_us = round(state.reset_after * 1_000_000)
    wait_us = -(-(reset_us * n - (state.rate.capacity - 1) * d) // n)
    return max(wait_us, 1) / 1_000_000


def _checked(decision: BudgetDecision, *, charge_follows: bool) -> Decision:
    """A cost-0 look at the budget as a Decision.

    A check (the descriptor's hits are 0) is over when no token is left. The
    look before a charge (hits > 0) is never over: a charge records tokens
    already spent and cannot be refused.
    """
    state = decision.axes[0]
    allowed = charge_follows or state.remaining >= 1
    return Decision(
        allowed=allowed,
        limit=state.limit,
        remaining=state.remaining,
        reset_after=state.reset_after,
        retry_after=0.0 if allowed else _wait_for_one(state),
        rate=state.rate,
        cost=0,
        refill_after=state.refill_after,
    )


def _charged(charge: Charge, cost: int) -> Decision:
    """A charge as a Decision: always allowed, with what is left after it."""
    state = charge.decision.axes[0]
    return Decision(
        allowed=True,
        limit=state.limit,
        remaining=state.remaining,
        reset_after=state.reset_after,
        retry_after=0.0,
        rate=state.rate,
        cost=cost,
        refill_after=state.refill_after,
    )


_B = TypeVar("_B", TokenBudget, AsyncTokenBudget)


class _RuleBudgetsBase(Generic[_B]):
    """One single-axis budget (``tokens``) per rate, on one store; no I/O here."""

    def __init__(self) -> None:
        self._budgets: dict[Rate, _B] = {}

    def _budget(self, rate: Rate) -> _B:
        budget = self._budgets.get(rate)
        if budget is None:
            if len(self._budgets) >= _MAX_RATES:
                self._budgets.clear()
            budget = self._budgets[rate] = self._make(rate)
        return budget

    def _make(self, rate: Rate) -> _B:
        raise NotImplementedError


class RuleBudgets(_RuleBudgetsBase[TokenBudget]):
    """The budget rules of ``RateLimitService`` on a synchronous store.

    ``hit(rate, key, hits, cost)``: ``hits`` is the descriptor's own hits (0: a
    check), ``cost`` what this store call consumes (0 while the service looks
    before charging). A check is over when ``key`` has no token left; a charge
    records ``cost`` tokens up to an empty budget and is always allowed.

    ``check`` and ``account`` are ``hit`` with a store's ``hit`` arguments
    ``(algorithm, key, rates, cost)`` (the first rate is the budget's), for a
    limiter to ask in place of the store: ``check`` for a descriptor of hits 0,
    ``account`` for one with hits.
    """

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def _make(self, rate: Rate) -> TokenBudget:
        return TokenBudget(self.store, {"tokens": rate}, max_output_tokens=0)

    def hit(self, rate: Rate, key: str, hits: int, cost: int) -> Decision:
        """Check (``cost`` 0) or charge (``cost`` tokens) the budget of ``key`` at ``rate``."""
        budget = self._budget(rate)
        if cost > 0:
            return _charged(budget.charge(key, Usage(0, cost, 0)), cost)
        return _checked(budget.peek(key), charge_follows=hits > 0)

    def check(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """A descriptor of hits 0: over when ``key`` has no token left."""
        return self.hit(rates[0], key, 0, cost)

    def account(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """A descriptor with hits: a look (``cost`` 0, never over) or the charge."""
        return self.hit(rates[0], key, 1, cost)

    def __repr__(self) -> str:
        return f"RuleBudgets({self.store!r})"


class AsyncRuleBudgets(_RuleBudgetsBase[AsyncTokenBudget]):
    """The asyncio twin of ``RuleBudgets``, for ``AsyncRateLimitService``."""

    def __init__(self, store: AsyncStore) -> None:
        super().__init__()
        self.store = store

    def _make(self, rate: Rate) -> AsyncTokenBudget:
        return AsyncTokenBudget(self.store, {"tokens": rate}, max_output_tokens=0)

    async def hit(self, rate: Rate, key: str, hits: int, cost: int) -> Decision:
        """See ``RuleBudgets.hit``."""
        budget = self._budget(rate)
        if cost > 0:
            return _charged(await budget.charge(key, Usage(0, cost, 0)), cost)
        return _checked(await budget.peek(key), charge_follows=hits > 0)

    async def check(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """See ``RuleBudgets.check``."""
        return await self.hit(rates[0], key, 0, cost)

    async def account(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """See ``RuleBudgets.account``."""
        return await self.hit(rates[0], key, 1, cost)

    def __repr__(self) -> str:
        return f"AsyncRuleBudgets({self.store!r})"
