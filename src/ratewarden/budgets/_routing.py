"""Per tenant and per upstream: one call reserves both, and a router picks the upstream.

A tenant's budget and an upstream's (a model, a provider account) live under
different keys, so on a Redis Cluster they are in different slots and cannot
share one script. The router therefore reserves in steps, tenant first, and
undoes the steps that must not stand: when no upstream has room (or the store
fails part-way), the tenant's reservation is cancelled by id, which refunds it
exactly. Upstreams that deny charge nothing (a denial writes nothing). A retry
under the id of a route still held goes back to the upstream holding it. An
``AsyncBudgetRouter.reserve`` that is cancelled cancels, by id, what it charged
(and what a call in flight may have charged) before its CancelledError goes on.

The route is written once, as a flow (``_RouterBase``) whose every step is one
call of a budget's own method: each budget runs it on its own limiter (the
tenant's and the upstreams' budgets may live on different stores), and a
failure is raised in the flow at that step. ``BudgetRouter`` and
``AsyncBudgetRouter`` are made of the flows (``blocking`` / ``awaiting``) and
drive them with the core's blocking and asyncio drivers.
"""

from __future__ import annotations

import asyncio
import functools
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ratewarden.budgets._budget import AsyncTokenBudget, TokenBudget
from ratewarden.budgets._twins import a_kind, undo_cancelled
from ratewarden.budgets._values import Reservation, Settlement
from ratewarden.checks import check_id, init_checked, keywords_checked
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import Ask, Flow, adrive, awaiting, blocking, drive

__all__ = ["AsyncBudgetRouter", "BudgetRouter", "Route", "Account"]

T = TypeVar("T")


@init_checked
@dataclass(frozen=True, slots=True)
class Account:
    """A named budget key: a tenant (``"tenant:acme"``) or an upstream model or provider
    account (``"openai:gpt-4o"``), each with its own ``TokenBudget``."""

    name: str
    budget: TokenBudget | AsyncTokenBudget
    key: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"Account name {self.name!r} must be a non-empty string")
        if not isinstance(self.budget, TokenBudget | AsyncTokenBudget):
            raise ConfigurationError(
                f"Account {self.name!r}: budget is {a_kind(self.budget)}, not a TokenBudget "
                "or an AsyncTokenBudget"
            )
        if not isinstance(self.key, str) or not self.key:
            raise ConfigurationError(
                f"Account {self.name!r}: key {self.key!r} must be a non-empty string"
            )


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


_Settled = tuple[Settlement | None, Settlement | None]


def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Flow[Any]:
    """One call of a budget's method, run by the driver (its coroutine awaited by the
    asyncio one) on the budget's own limiter; what it raises is raised here."""
    reply = yield Ask(functools.partial(method, *args, **kwargs), ())
    if isinstance(reply, Exception):
        raise reply
    return reply


def _reserve(charged: list[Account], account: Account, request: dict[str, Any]) -> Flow[Any]:
    """``account``'s reserve, in ``charged`` while in flight and after, when it charged."""
    charged.append(account)
    found = yield from _call(account.budget.reserve, account.key, **request)
    if not found.allowed or found.replayed:
        charged.remove(account)  # it charged nothing (a retry's is the first call's)
    return found


async def _cancel_all(charged: Sequence[Account], rid: str) -> None:
    """Cancel reservation ``rid`` of each account, side by side (each on its own store)."""
    calls: list[Any] = [a.budget.settle_id(a.key, rid, a.budget._unused()) for a in charged]
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException):
            raise result


class _RouterBase:
    #: The budgets a shell drives (``TokenBudget`` or ``AsyncTokenBudget``), and the other shell.
    _budget: ClassVar[type[TokenBudget] | type[AsyncTokenBudget]]
    _twin: ClassVar[str]

    @keywords_checked
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
        owner, wanted = type(self).__name__, type(self)._budget
        for account in (tenant, *found) if tenant is not None else found:
            if not isinstance(account.budget, wanted):
                raise ConfigurationError(
                    f"{owner}: the budget of account {account.name!r} is "
                    f"{a_kind(account.budget)}; {owner} drives {wanted.__name__} budgets: give "
                    f"it {wanted.__name__} budgets, or use {type(self)._twin} over "
                    f"{type(account.budget).__name__} budgets"
                )
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

    def reserve_flow(
        self,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        tenant_key: str | None = None,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
        prefer: Sequence[str] | None = None,
    ) -> Flow[Route]:
        """Tenant first, then each upstream in order (``prefer`` reorders them for this call);
        the tenant is refunded when none fits. A retry under the id of a route still held
        gets that route's upstream again, charging nothing."""
        return (
            yield from self._route_flow(
                [],
                input_tokens,
                max_output_tokens,
                tenant_key=tenant_key,
                units=units,
                reservation_id=reservation_id,
                prefer=prefer,
            )
        )

    def _route_flow(
        self,
        charged: list[Account],
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        tenant_key: str | None = None,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
        prefer: Sequence[str] | None = None,
    ) -> Flow[Route]:
        """``reserve_flow``, keeping in ``charged`` the accounts this call charged (or whose
        call is in flight, and so may have): what a cancelled call must cancel by id."""
        tenant = self.tenant
        if tenant is not None and tenant_key is not None:
            tenant = Account(tenant.name, tenant.budget, tenant_key)
        # One id for the tenant's reservation and the upstream's.
        rid = uuid.uuid4().hex if reservation_id is None else check_id("id", reservation_id)
        request = {
            "input_tokens": input_tokens,
            "max_output_tokens": max_output_tokens,
            "units": units,
            "reservation_id": rid,
        }
        upstreams = self._order(prefer)
        held: Reservation | None = None
        if tenant is not None:
            held = yield from _reserve(charged, tenant, request)
            if not held.allowed:
                return Route(False, None, held, None, held.decision.retry_after, "tenant")
        waits = []
        try:
            # A retry (the tenant's reservation replayed, or no tenant and the caller's id)
            # goes to the upstream still holding that id, not to the first with room now,
            # which would charge a second upstream and leave the first charged.
            retry = held.replayed if held is not None else reservation_id is not None
            if retry:
                for upstream in upstreams:
                    if (yield from _call(upstream.budget._holds, upstream.key, rid)):
                        found = yield from _reserve(charged, upstream, request)
                        if found.allowed:
                            return Route(True, upstream.name, held, found, 0.0)
            for upstream in upstreams:
                found = yield from _reserve(charged, upstream, request)
                if found.allowed:
                    return Route(True, upstream.name, held, found, 0.0)
                waits.append(found.decision.retry_after)
        except Exception:
            # A store failure part-way: give the tenant's reservation back, then report it.
            if tenant is not None and held is not None:
                yield from _call(tenant.budget.cancel, held)
            raise
        if tenant is not None and held is not None:
            yield from _call(tenant.budget.cancel, held)
            charged.clear()
        return Route(False, None, held, None, min(waits, default=math.inf), "upstreams")

    def settle_flow(
        self, /, route: Route, *, output_tokens: int, input_tokens: int | None = None, **kw: Any
    ) -> Flow[_Settled]:
        """Settle the tenant's and the upstream's reservations with the same actual usage."""
        usage = dict(kw, output_tokens=output_tokens, input_tokens=input_tokens)
        done: list[Settlement | None] = []
        tenant_budget = None if self.tenant is None else self.tenant.budget
        for budget, held in ((tenant_budget, route.tenant), (None, route.reservation)):
            if held is None or not held.allowed:
                done.append(None)
                continue
            target = budget if budget is not None else self._budget_of(route)
            done.append((yield from _call(target.settle, held, **usage)))
        return done[0], done[1]

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

    _budget = TokenBudget
    _twin = "AsyncBudgetRouter"
    reserve = blocking(_RouterBase.reserve_flow)
    settle = blocking(_RouterBase.settle_flow)

    def run(self, flow: Flow[T]) -> T:
        """Drive ``flow``: each step one call of a budget's own method, blocking."""
        return drive(None, flow)


class AsyncBudgetRouter(_RouterBase):
    """The asyncio twin of ``BudgetRouter`` over ``AsyncTokenBudget`` upstreams."""

    _budget = AsyncTokenBudget
    _twin = "BudgetRouter"
    settle = awaiting(_RouterBase.settle_flow)

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
        """``BudgetRouter.reserve``, awaited. Cancelled part-way (``wait_for``, a client
        gone), it cancels by id what it charged, and what a call in flight may have, before
        the CancelledError goes on (waiting at most ``UNDO_WAIT`` seconds for the stores)."""
        rid = uuid.uuid4().hex if reservation_id is None else reservation_id
        charged: list[Account] = []
        flow = self._route_flow(
            charged,
            input_tokens,
            max_output_tokens,
            tenant_key=tenant_key,
            units=units,
            reservation_id=rid,
            prefer=prefer,
        )
        try:
            return await self.run(flow)
        except asyncio.CancelledError:
            if charged:
                await undo_cancelled(f"route {rid!r}", _cancel_all(list(charged), rid))
            raise

    async def run(self, flow: Flow[T]) -> T:
        """Drive ``flow``, each budget's call awaited."""
        return await adrive(None, flow)
