"""Per-route opt-out and overrides: the decorators, and the metadata they attach.

The decorators only attach metadata (``__ratewarden__``) and return the same
function or class, so they work on Starlette and FastAPI endpoints, Flask views
and Django views (function views, or the class of a class-based view)::

    @exempt()                                   # no rule applies here
    @exempt("per-ip")                           # these rules skip this route
    @limit("5/minute", name="login")            # an extra rule for this route only
    @override("contract", cost=5)               # a global rule, changed here

What the router calls is what they decorate: a function view, or a view class.
A method of a class-based view (``View.get``, ``MethodView.post``,
``HTTPEndpoint.get``) is not a route, and nor is a websocket endpoint (the
middleware passes websocket scopes through): a resolver that lists its app's
routes refuses decorators there at the first request (``_catalog``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ratewarden.errors import ConfigurationError
from ratewarden.middleware._denied import DeniedHook
from ratewarden.middleware._identity import ANONYMOUS, KeyFunc, calls_checked
from ratewarden.middleware._rules import CostFunc, Rule, check_name
from ratewarden.rate import Rate

__all__ = [
    "ATTRIBUTE",
    "Override",
    "RouteLimits",
    "declared_rule_names",
    "exempt",
    "limit",
    "override",
    "route_limits",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The attribute the decorators set on what they decorate.
ATTRIBUTE = "__ratewarden__"
_declared: set[str] = set()
_declared_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Override:
    """New rates and/or cost for one global rule on one route."""

    rates: str | Rate | Sequence[str | Rate] | None = None
    cost: int | Mapping[str, int] | CostFunc | None = None


@dataclass(frozen=True, slots=True)
class RouteLimits:
    """What the decorators on one endpoint say."""

    exempt_all: bool = False
    exempt: frozenset[str] = frozenset()
    rules: tuple[Rule, ...] = ()
    overrides: Mapping[str, Override] = field(default_factory=dict)


def declared_rule_names() -> frozenset[str]:
    """Names of the rules declared with ``@limit`` so far (for kill-switch name checks)."""
    with _declared_lock:
        return frozenset(_declared)


def route_limits(endpoint: object) -> RouteLimits | None:
    """The metadata on ``endpoint`` (or on its ``view_class``, for Django class views)."""
    for holder in (endpoint, getattr(endpoint, "view_class", None)):
        found = getattr(holder, ATTRIBUTE, None)
        if isinstance(found, RouteLimits):
            return found
    return None


def _attach(func: F, change: Callable[[RouteLimits], RouteLimits]) -> F:
    if not callable(func):
        raise ConfigurationError(f"rate limit decorators apply to views; got {func!r}")
    current = route_limits(func) if hasattr(func, ATTRIBUTE) else None
    setattr(func, ATTRIBUTE, change(current or RouteLimits()))
    return func


def _named(func: object) -> str:
    return str(getattr(func, "__qualname__", None) or repr(func))


def _own(func: object) -> bool:
    """Whether ``func`` carries metadata of its own (a class may inherit its base's)."""
    return ATTRIBUTE in getattr(func, "__dict__", {})


def exempt(*rule_names: str) -> Callable[[F], F]:
    """Opt a route out of every rule (no names) or of the named rules."""
    names = frozenset(check_name(n) for n in rule_names)

    def decorate(func: F) -> F:
        if not names:
            return _attach(func, lambda meta: replace(meta, exempt_all=True))
        return _attach(func, lambda meta: replace(meta, exempt=meta.exempt | names))

    return decorate


@calls_checked
def limit(
    rates: str | Rate | Sequence[str | Rate],
    *,
    name: str,
    key: KeyFunc | None = None,
    cost: int | Mapping[str, int] | CostFunc = 1,
    shadow: bool = False,
    fallback: str = ANONYMOUS,
    denied: DeniedHook | None = None,
) -> Callable[[F], F]:
    """Add a rule that applies to this route only (after the global rules).

    Routes decorated with the same ``name`` and rates share one budget; one route
    takes one ``@limit`` of a name (give several rates in it: ``"5/minute; 1/second"``).
    ``denied``: the answer to a request it denies, as ``Rule``'s.
    """
    rule = Rule(name, rates, key=key, cost=cost, shadow=shadow, fallback=fallback, denied=denied)
    with _declared_lock:
        _declared.add(rule.name)

    def add(func: object, meta: RouteLimits) -> RouteLimits:
        if _own(func) and any(r.name == rule.name for r in meta.rules):
            raise ConfigurationError(
                f"@limit(name={rule.name!r}) is on {_named(func)} twice: one rule of a name per "
                f'route; give every rate in one @limit ("5/minute; 1/second", name=...)'
            )
        return replace(meta, rules=(*meta.rules, rule))

    def decorate(func: F) -> F:
        return _attach(func, lambda meta: add(func, meta))

    return decorate


@calls_checked
def override(
    rule_name: str,
    *,
    rates: str | Rate | Sequence[str | Rate] | None = None,
    cost: int | Mapping[str, int] | CostFunc | None = None,
) -> Callable[[F], F]:
    """Change a global rule's rates and/or cost on this route.

    A cost override shares the rule's budget; a rates override is a separate
    budget for this route (state is kept per rate). One route takes one
    ``@override`` of a rule (give ``rates=`` and ``cost=`` in it).
    """
    check_name(rule_name)
    if rates is None and cost is None:
        raise ConfigurationError(f"override({rule_name!r}) needs rates=, cost= or both")
    # Validate now, at import time, rather than on the first request.
    Rule(
        rule_name, rates if rates is not None else "1/second", cost=cost if cost is not None else 1
    )
    change = Override(rates, cost)

    def add(func: object, meta: RouteLimits) -> RouteLimits:
        if _own(func) and rule_name in meta.overrides:
            raise ConfigurationError(
                f"@override({rule_name!r}) is on {_named(func)} twice: give rates= and cost= "
                "in one @override"
            )
        return replace(meta, overrides={**meta.overrides, rule_name: change})

    def decorate(func: F) -> F:
        return _attach(func, lambda meta: add(func, meta))

    return decorate
