"""A rule compiled for requests, the limiter calls it makes, and the loops that make them.

A rule set evaluates a request as a generator (see ``RuleSet.run``): it yields
one ``Hit`` per rule, receives that hit's Decision and returns an ``Outcome``.
``drive`` runs it over a limiter that answers at once (``Limiter.hit``,
``AsyncLimiter.hit_now``), ``drive_async`` over one that is awaited; they are
the only code the blocking and the asyncio middlewares do not share.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ratewarden.clock import Clock, SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.headers import HeaderOptions, never_allowed
from ratewarden.middleware._denied import DeniedHook, Responder
from ratewarden.middleware._identity import KeyFunc
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._render import HeaderPlan
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._routes import Override, RouteLimits
from ratewarden.middleware._rules import FixedCost, Rule
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.middleware._failure import FailureAnswer

__all__ = [
    "AsgiAnswer",
    "AsyncHitter",
    "Compiled",
    "Evaluation",
    "Hit",
    "HitNow",
    "Hitter",
    "RouteRules",
    "check_rules",
    "drive",
    "drive_async",
]


class Hitter(Protocol):
    """Anything with a synchronous ``hit``: ``Limiter``, or a two-tier limiter."""

    def hit(
        self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """Consume ``cost`` on every rate of ``key`` if all allow (never block when ``shadow``)."""
        ...


class AsyncHitter(Protocol):
    """Anything with an asyncio ``hit``: ``AsyncLimiter``, or a two-tier limiter."""

    async def hit(
        self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """Consume ``cost`` on every rate of ``key`` if all allow (never block when ``shadow``)."""
        ...


class HitNow(Protocol):
    """A limiter's ``hit`` that answers at once: ``Limiter.hit``, ``AsyncLimiter.hit_now``."""

    def __call__(
        self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """Consume ``cost`` on every rate of ``key`` if all allow (never block when ``shadow``)."""
        ...


#: One limiter call the core asks for: ``(key, rates, cost, shadow)``. A plain tuple,
#: since one is made per rule per request.
Hit = tuple[str, tuple[Rate, ...], int, bool]

Evaluation = Generator[Hit, Decision, Outcome]

#: What ``decide_asgi`` answers: None (it cannot; take the general path), an allowed
#: request's headers encoded for ASGI, or the ``Outcome``.
AsgiAnswer = list[tuple[bytes, bytes]] | Outcome | None


def drive(evaluation: Evaluation, limit: Any, failure: FailureAnswer | None = None) -> Outcome:
    """Run ``evaluation`` over ``limit(key, rates, cost, shadow=...)``, answered at once;
    each hit carries ``failure`` (the middleware's failure mode and report) when given.

    They go as two keywords written out, not ``**kwargs``: unpacking a dict
    per call cost the WSGI middleware 6,000 instructions a request (callgrind)."""
    try:
        hit = next(evaluation)
        if failure is None:
            while True:
                hit = evaluation.send(limit(hit[0], hit[1], hit[2], shadow=hit[3]))
        mode, report = failure.failure_mode, failure.report
        while True:
            decision = limit(
                hit[0], hit[1], hit[2], shadow=hit[3], failure_mode=mode, on_failure=report
            )
            hit = evaluation.send(decision)
    except StopIteration as done:
        outcome: Outcome = done.value
        return outcome


async def drive_async(
    evaluation: Evaluation, limiter: AsyncHitter, failure: FailureAnswer | None = None
) -> Outcome:
    """Run ``evaluation`` against an asyncio limiter (``await limiter.hit(...)``)."""
    ask: Any = limiter.hit
    try:
        hit = next(evaluation)
        if failure is None:
            while True:
                hit = evaluation.send(await ask(hit[0], hit[1], hit[2], shadow=hit[3]))
        mode, report = failure.failure_mode, failure.report
        while True:
            decision = await ask(
                hit[0], hit[1], hit[2], shadow=hit[3], failure_mode=mode, on_failure=report
            )
            hit = evaluation.send(decision)
    except StopIteration as done:
        outcome: Outcome = done.value
        return outcome


class Compiled:
    """A rule with everything a request does not change worked out once.

    The store key prefix, the identity extractor (the rule's or the rule set's
    default), a fixed cost read without a call, the header plan and the answer to
    a denial (``denied``: the rule's or the rule set's, None for the default 429);
    for the built-in extractors, ``scope_key``: the store key read from an ASGI scope.
    """

    __slots__ = (
        "asgi_key",
        "cost",
        "denied",
        "fallback",
        "fixed_cost",
        "headers",
        "key",
        "name",
        "prefix",
        "rates",
        "rule",
        "scope_key",
        "shadow",
        "unfiltered",
    )

    def __init__(
        self,
        rule: Rule,
        default_key: KeyFunc,
        options: HeaderOptions,
        denied: DeniedHook | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.rule = rule
        self.name = rule.name
        self.prefix = f"{rule.name}:"
        self.rates = rule.rates
        self.key: KeyFunc = rule.key or default_key
        # The built-in extractors' twin reading the ASGI scope itself (see RuleSet.decide_asgi).
        self.asgi_key: Callable[[Mapping[str, Any]], str | None] | None = getattr(
            self.key, "asgi", None
        )
        self.cost = rule.cost
        self.fixed_cost = rule.cost.value if isinstance(rule.cost, FixedCost) else None
        self.shadow = rule.shadow
        self.fallback = rule.fallback
        self.unfiltered = rule.methods is None and rule.paths is None
        self.headers = HeaderPlan(rule.name, rule.rates, options)
        hook = rule.denied if rule.denied is not None else denied
        self.denied = None if hook is None else Responder(hook, clock or SystemClock())
        #: The store key of an ASGI scope: ``prefix + (asgi_key(scope) or fallback)``.
        self.scope_key: Callable[[Mapping[str, Any]], str] | None = None
        scope_keys = getattr(self.key, "scope_keys", None)
        if scope_keys is not None:
            self.scope_key = scope_keys(self.prefix, self.fallback)
        elif self.asgi_key is not None:
            asgi, prefix, fallback = self.asgi_key, self.prefix, self.fallback
            self.scope_key = lambda scope: prefix + (asgi(scope) or fallback)

    @property
    def plain(self) -> bool:
        """Applies to every request, reads its key from the scope, costs a fixed amount and
        enforces: ``RuleSet.decide_asgi`` can decide it from the ASGI scope alone."""
        return (
            self.unfiltered
            and self.scope_key is not None
            and self.fixed_cost is not None
            and not self.shadow
        )


#: Compiled route rules and overrides kept per rule set before the cache starts over.
_ROUTE_CACHE_SIZE = 4096


class RouteRules:
    """The rules of decorated routes (``@limit``, ``@override``, ``@exempt``), compiled
    once per decorator, not per request."""

    def __init__(
        self,
        compiled: tuple[Compiled, ...],
        default_key: KeyFunc,
        options: HeaderOptions,
        denied: DeniedHook | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._compiled = compiled
        self._names = frozenset(c.name for c in compiled)
        self._default_key = default_key
        self._options = options
        self._denied = denied
        self._clock = clock
        # (id of the decorator's object, rule name) -> (that object, kept alive so the id
        # stays its own; the compiled rule).
        self._cache: dict[tuple[int, str], tuple[object, Compiled]] = {}

    def resolve(self, meta: RouteLimits, request: RequestInfo) -> tuple[Compiled, ...]:
        """The rules for ``request`` on a route with ratewarden metadata ``meta``."""
        if not (self._names.issuperset(meta.exempt) and self._names.issuperset(meta.overrides)):
            self._unknown(meta, request)
        if meta.exempt_all:
            return ()
        found = []
        for compiled in self._compiled:
            rule = compiled.rule
            if rule.name in meta.exempt or not rule.matches(request):
                continue
            change = meta.overrides.get(rule.name)
            found.append(compiled if change is None else self._overridden(rule, change))
        for rule in meta.rules:
            if rule.name in self._names:
                raise ConfigurationError(
                    f"@limit rule {rule.name!r} on {request.path} has the name of a global rule"
                )
            found.append(self._compile(rule, rule))
        return tuple(found)

    def _unknown(self, meta: RouteLimits, request: RequestInfo) -> None:
        """Raise for a name in ``@exempt`` or ``@override`` that is no rule of this rule set:
        a typo there would leave the rule applied, or unchanged, without a word."""
        for what, names in (("exempt", meta.exempt), ("override", meta.overrides)):
            unknown = sorted(set(names) - self._names)
            if unknown:
                raise ConfigurationError(
                    f"@{what}({', '.join(map(repr, unknown))}) on {request.path} names no rule "
                    f"of the RuleSet; its rules: {sorted(self._names)}"
                )

    def _overridden(self, rule: Rule, change: Override) -> Compiled:
        found = self._cache.get((id(change), rule.name))
        if found is not None and found[0] is change:
            return found[1]
        return self._compile(change, rule.with_changes(change.rates, change.cost))

    def _compile(self, owner: object, rule: Rule) -> Compiled:
        cache_key = (id(owner), rule.name)
        entry = self._cache.get(cache_key)
        if entry is not None and entry[0] is owner:
            return entry[1]
        compiled = Compiled(rule, self._default_key, self._options, self._denied, self._clock)
        if len(self._cache) >= _ROUTE_CACHE_SIZE:
            self._cache.clear()
        self._cache[cache_key] = (owner, compiled)
        return compiled


def check_rules(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """The rules as a tuple: Rule objects with distinct names."""
    if isinstance(rules, Rule | str | bytes | Mapping) or not isinstance(rules, Iterable):
        raise ConfigurationError(
            f"RuleSet rules {rules!r} must be a list of Rule objects; for one rule, pass a list"
            " of one: RuleSet([Rule(...)])"
        )
    checked = tuple(rules)
    seen: set[str] = set()
    for rule in checked:
        if not isinstance(rule, Rule):
            raise ConfigurationError(f"RuleSet rules must be Rule objects; got {rule!r}")
        if rule.name in seen:
            raise ConfigurationError(f"RuleSet: two rules are named {rule.name!r}")
        seen.add(rule.name)
    return checked


def binding(entry: tuple[Compiled, str, Decision]) -> tuple[bool, bool, int, float]:
    """Sort key of the rule whose decision the headers describe: a denial first (one that no
    wait can turn into an allow before any other: waiting for the rest would not help),
    else the fewest remaining, then the longest reset."""
    decision = entry[2]
    return (
        decision.allowed,
        not never_allowed(decision),
        decision.remaining,
        -decision.reset_after,
    )
