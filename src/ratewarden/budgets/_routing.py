"""Per tenant and per upstream: one call reserves both, and a router picks the upstream.

A tenant's budget and an upstream's (a model, a provider account) live under
different keys, so on a Redis Cluster they are in different slots and cannot
share one script. The router therefore reserves in steps, tenant first, and
undoes the steps that must not stand: when no upstream has room (or the store
fails part-way), the tenant's reservation is cancelled by id, which refunds it
exactly. Upstreams that deny charge nothing (a denial writes nothing).

The flow is written once, as a generator of store calls, and driven by a sync
and an async loop (the httpx pattern).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.budgets._budget import AsyncTokenBudget, Reservation, Settlement, TokenBudget
from ratewarden.checks import check_id
from ratewarden.errors import ConfigurationError

__all__ = ["AsyncBudgetRouter", "BudgetRouter", "Route", "Account"]


@dataclass(frozen=True, slots=True)
class Account:
    """A named budget key: a tenant (``"tenant:acme"``) or an upstream model or provider
    account (``"openai:gpt-4o"``), each with its own ``TokenBudget``."""

    name: str
    budget: TokenBudget | AsyncTokenBudget
    key: str


@dataclass(frozen=True, slots=True)
class Route:
    """The result of ``reserve``: the upstream chosen, or why none was.

    ``denied_by`` is ``""`` when allowed, ``"tenant"`` or ``"upstreams"``.
    ``retry_after`` is the wait of the tenant's budget when it denied, else the
    shortest wait among the upstreams.
    """

    allowed: bool
    upstream: str | None
    tenant: Reservation | None
    reservation: Reservation | None
    retry_after: float
    denied_by: str = ""

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True, slots=True)
class _Call:
    """One store call the flow asks its driver to make."""

    budget: TokenBudget | AsyncTokenBudget
    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


_Flow = Generator[_Call, Any, Route]


def _reserve_call(
    budget: TokenBudget | AsyncTokenBudget, key: str, request: Mapping[str, Any]
) -> _Call:
    return _Call(budget, "reserve", (key,), request)


def _route_flow(
    tenant: Account | None, upstreams: Sequence[Account], request: Mapping[str, Any]
) -> _Flow:
    cancel: _Call | None = None
    held: Reservation | None = None
    if tenant is not None:
        held = yield _reserve_call(tenant.budget, tenant.key, request)
        assert held is not None
        if not held.allowed:
            return Route(False, None, held, None, held.decision.retry_after, "tenant")
        cancel = _Call(tenant.budget, "cancel", (held,), {})
    waits = []
    try:
        for upstream in upstreams:
            found: Reservation = yield _reserve_call(upstream.budget, upstream.key, request)
            if found.allowed:
                return Route(True, upstream.name, held, found, 0.0)
            waits.append(found.decision.retry_after)
    except Exception:
        # A store failure part-way: give the tenant's reservation back, then report it.
        if cancel is not None:
            yield cancel
        raise
    if cancel is not None:
        yield cancel
    return Route(False, None, held, None, min(waits, default=math.inf), "upstreams")


class _RouterBase:
    def __init__(self, tenant: Account | None, upstreams: Sequence[Account]) -> None:
        if tenant is not None and not isinstance(tenant, Account):
            raise ConfigurationError(f"tenant {tenant!r} must be an Account(name, budget, key)")
        found = tuple(upstreams)
        if not found or not all(isinstance(u, Account) for u in found):
            raise ConfigurationError(
                f"upstreams {upstreams!r} must be a non-empty list of Account(name, budget, key)"
            )
        names = [u.name for u in found]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"upstream names {names} repeat a name")
        self.tenant = tenant
        self.upstreams = found

    def _order(self, prefer: Sequence[str] | None) -> tuple[Account, ...]:
        if prefer is None:
            return self.upstreams
        by_name = {u.name: u for u in self.upstreams}
        unknown = [name for name in prefer if name not in by_name]
        if unknown or not prefer:
            raise ConfigurationError(
                f"prefer {list(prefer)!r} must name some of the upstreams {sorted(by_name)}"
            )
        return tuple(by_name[name] for name in prefer)

    def _flow(
        self,
        tenant_key: str | None,
        request: dict[str, Any],
        prefer: Sequence[str] | None,
    ) -> _Flow:
        tenant = self.tenant
        if tenant is not None and tenant_key is not None:
            tenant = Account(tenant.name, tenant.budget, tenant_key)
        rid = request.get("reservation_id")
        request["reservation_id"] = uuid.uuid4().hex if rid is None else check_id("id", rid)
        return _route_flow(tenant, self._order(prefer), request)

    def _budget_of(self, route: Route) -> TokenBudget | AsyncTokenBudget:
        for upstream in self.upstreams:
            if upstream.name == route.upstream:
                return upstream.budget
        raise ConfigurationError(f"route {route!r} was not made by this router")


class BudgetRouter(_RouterBase):
    """Reserve on the tenant's budget and on the first upstream with room, in order.

    ::

        router = BudgetRouter(
            Account("tenant", tenants, "tenant:acme"),
            [Account("gpt-4o", openai, "openai:gpt-4o"), Account("claude", anthropic, "anth")],
        )
        route = router.reserve(input_tokens=1200, tenant_key="tenant:acme")
        if route:
            ...  # call route.upstream
            router.settle(route, output_tokens=350)
    """

    def reserve(
        self,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        tenant_key: str | None = None,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
        prefer: Sequence[str] | None = None,
    ) -> Route:
        """Tenant first, then each upstream in order (``prefer`` reorders them for this call)."""
        request = {
            "input_tokens": input_tokens,
            "max_output_tokens": max_output_tokens,
            "units": units,
            "reservation_id": reservation_id,
        }
        flow = self._flow(tenant_key, request, prefer)
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = flow.send(result) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                result, error = getattr(call.budget, call.method)(*call.args, **call.kwargs), None
            except Exception as exc:
                result, error = None, exc

    def settle(
        self, route: Route, *, output_tokens: int, input_tokens: int | None = None, **kw: Any
    ) -> tuple[Settlement | None, Settlement | None]:
        """Settle the tenant's and the upstream's reservations with the same actual usage."""
        done: list[Settlement | None] = []
        for budget, held in ((self._tenant_budget(), route.tenant), (None, route.reservation)):
            if held is None or not held.allowed:
                done.append(None)
                continue
            target: Any = budget if budget is not None else self._budget_of(route)
            done.append(
                target.settle(held, output_tokens=output_tokens, input_tokens=input_tokens, **kw)
            )
        return done[0], done[1]

    def _tenant_budget(self) -> TokenBudget | AsyncTokenBudget | None:
        return None if self.tenant is None else self.tenant.budget


class AsyncBudgetRouter(_RouterBase):
    """The asyncio twin of ``BudgetRouter`` over ``AsyncTokenBudget`` upstreams."""

    async def reserve(
        self,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        tenant_key: str | None = None,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
        prefer: Sequence[str] | None = None,
    ) -> Route:
        """See ``BudgetRouter.reserve``."""
        request = {
            "input_tokens": input_tokens,
            "max_output_tokens": max_output_tokens,
            "units": units,
            "reservation_id": reservation_id,
        }
        flow = self._flow(tenant_key, request, prefer)
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = flow.send(result) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                method = getattr(call.budget, call.method)
                result, error = await method(*call.args, **call.kwargs), None
            except Exception as exc:
                result, error = None, exc

    async def settle(
        self, route: Route, *, output_tokens: int, input_tokens: int | None = None, **kw: Any
    ) -> tuple[Settlement | None, Settlement | None]:
        """See ``BudgetRouter.settle``."""
        done: list[Settlement | None] = []
        tenant_budget = None if self.tenant is None else self.tenant.budget
        for budget, held in ((tenant_budget, route.tenant), (None, route.reservation)):
            if held is None or not held.allowed:
                done.append(None)
                continue
            target: Any = budget if budget is not None else self._budget_of(route)
            done.append(
                await target.settle(
                    held, output_tokens=output_tokens, input_tokens=input_tokens, **kw
                )
            )
        return done[0], done[1]
