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

A charge the store cannot take is owed (a ``Backlog``) and paid before the same
key's next call reaches the store.

``ratewarden serve`` answers the same way for a descriptor with a ``budget``
in its config (``ratewarden.server.config.budget``), through ``RuleBudgets`` /
``AsyncRuleBudgets`` (``server/rule_budgets.py``; still importable from here).

This module was ``ratewarden.budgets.envoy``; that name still imports, with a
``DeprecationWarning``, for one release. Everything here uses ``TokenBudget``'s
public API only.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING, Any

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.budgets import AsyncTokenBudget, Backlog, BudgetDecision, Usage
from ratewarden.checks import refuse_class
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.server.rule_budgets import (
    BACKLOG_KEYS,
    AsyncRuleBudgets,
    Reached,
    RuleBudgets,
    wait_for_one,
)

if TYPE_CHECKING:
    from ratewarden.storage import AsyncStore

__all__ = ["AsyncRuleBudgets", "BudgetRateLimitService", "Reached", "RuleBudgets"]

_Response = rls_pb2.RateLimitResponse
_UNITS = {
    1_000_000: _Response.RateLimit.SECOND,
    60_000_000: _Response.RateLimit.MINUTE,
    3_600_000_000: _Response.RateLimit.HOUR,
    86_400_000_000: _Response.RateLimit.DAY,
}


def _check_store(store: object) -> None:
    """Refuse, under this service's name, a store it cannot await (the budget's own check
    would name its internal ``AsyncLimiter``). Named by its type only: a URL given by
    mistake may hold a password. A store of the caller's whose ``hit`` returns awaitables
    (a wrapper) is taken, as ``AsyncLimiter`` takes it."""
    refuse_class("BudgetRateLimitService", "store", store, needs="hit")
    name = type(store).__name__
    kind = f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"
    hit = getattr(store, "hit", None)
    if not callable(hit):
        raise ConfigurationError(
            f"BudgetRateLimitService: store is {kind}, not a store (it has no hit); give "
            "an asyncio store: AsyncMemoryStore() or AsyncRedisStore.from_url(url)"
        )
    if not inspect.iscoroutinefunction(hit) and type(store).__module__.startswith("ratewarden."):
        raise ConfigurationError(
            f"BudgetRateLimitService: store is {kind}, a blocking store; the service runs on "
            "asyncio and needs an asyncio store: AsyncMemoryStore() or "
            "AsyncRedisStore.from_url(url)"
        )


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
        _check_store(store)
        for what, value in (("domain", domain), ("descriptor_key", descriptor_key)):
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"{what} {value!r} must be a non-empty string")
        self.domain = domain
        self.descriptor_key = descriptor_key
        # A charge the store cannot take is owed and paid before the key's next call.
        backlog = Backlog(BACKLOG_KEYS)
        self.budget = AsyncTokenBudget(
            store, {"tokens": rate}, max_output_tokens=0, backlog=backlog
        )
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
        # Over: the wait for the next token, as serve's budget rules answer (the check is
        # over until one is back); else the time until the budget is full again.
        wait = wait_for_one(state) if over else state.reset_after
        status.duration_until_reset.seconds = 0 if math.isinf(wait) else math.ceil(wait)
        return status

    def __repr__(self) -> str:
        return (
            f"BudgetRateLimitService(domain={self.domain!r}, "
            f"descriptor_key={self.descriptor_key!r}, rate={self.rate})"
        )
