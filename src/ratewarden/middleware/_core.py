"""The sans-I/O core shared by the ASGI and WSGI middleware: ``RuleSet``.

``RuleSet.run(request, rules)`` is a generator: it yields one ``Hit`` per rule
that applies, receives that hit's ``Decision``, and returns an ``Outcome``
(pass with headers, or a 429 with headers and body). ``decide`` drives it over
a limiter that answers at once (a synchronous one, or an asyncio one whose
store is in this process), ``drive_async`` over an awaited one: the only place
the two middlewares differ. ``decide_asgi`` answers from the ASGI scope alone
when every rule allows it (see ``plain_asgi``).

Order and layering: the global rules in the order given, then the route's own
``@limit`` rules. Each enforced rule must allow; evaluation stops at the
first enforced denial, so rules after it consume nothing (put the generous
per-IP backstop first and a request it refuses costs the customer's contract
nothing). Rules before it have consumed: across different keys there is no
atomic step. The headers describe the binding rule: the one that denied, or
else the one with the fewest requests remaining.

Shadow rules are evaluated and counted but never block and never show in the
headers. A disabled rule (the kill switch) is not evaluated at all. With a
middleware's failure mode (``failure``: its answer), the first decision that
failure mode made (the store failed) ends the evaluation, and the request gets
its answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ratewarden import headers as rl_headers
from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.headers import HeaderOptions
from ratewarden.middleware._catalog import Catalog, checked, route_catalog
from ratewarden.middleware._clock import checked_clock
from ratewarden.middleware._compiled import (
    AsgiAnswer,
    AsyncHitter,
    Compiled,
    Evaluation,
    Hit,
    HitNow,
    Hitter,
    RouteRules,
    binding,
    check_rules,
    drive,
    drive_async,
)
from ratewarden.middleware._denied import DeniedHook, check_denied
from ratewarden.middleware._identity import KeyFunc, by_client_ip
from ratewarden.middleware._key_checks import check_key, key_returned
from ratewarden.middleware._outcome import PASS, Outcome, Passed
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._routes import Resolver, route_limits
from ratewarden.middleware._rules import Rule
from ratewarden.middleware._switches import Switches

if TYPE_CHECKING:
    from ratewarden.middleware._failure import FailureAnswer

__all__ = [
    "AsgiAnswer",
    "AsyncHitter",
    "Hit",
    "HitNow",
    "Hitter",
    "Outcome",
    "RuleSet",
    "drive_async",
]


class RuleSet(Switches):
    """The rules, their runtime switches, the header options and the shadow report.

    Create it, hand it to the middleware, keep a reference for operations:
    ``rules.disable("contract")`` (kill switch), ``rules.set_shadow("contract",
    True)``, ``rules.shadow_report()``. Switches are thread-safe and take effect
    on the next request, without a restart.

    ``default_key`` is the identity of rules without their own ``key``
    (the socket peer's address unless given). ``clock`` supplies ``now`` for
    epoch resets and the shadow report; pass the store's clock in tests.
    ``denied`` answers the denials of rules without a ``denied`` of their own
    (a ``Denied``, or a callable of a ``Denial``); None keeps the default 429.
    """

    @keywords_checked
    def __init__(
        self,
        rules: Iterable[Rule],
        *,
        default_key: KeyFunc | None = None,
        headers: HeaderOptions | None = None,
        resolver: Resolver | None = None,
        clock: Clock | None = None,
        report_size: int = 100,
        denied: DeniedHook | None = None,
    ) -> None:
        self.rules = check_rules(rules)
        self.denied = check_denied(denied, "RuleSet")
        if default_key is not None and not callable(default_key):
            raise ConfigurationError(f"default_key {default_key!r} must be a key extractor")
        check_key(default_key, "RuleSet default_key")
        if resolver is not None and not callable(resolver):
            raise ConfigurationError(f"resolver {resolver!r} must be callable")
        if headers is not None and not isinstance(headers, HeaderOptions):
            raise ConfigurationError(f"headers {headers!r} must be a HeaderOptions")
        self.default_key: KeyFunc = default_key if default_key is not None else by_client_ip()
        self.headers = headers if headers is not None else HeaderOptions()
        self.resolver = resolver
        self.clock = checked_clock("RuleSet", clock)
        Switches.__init__(self, self.rules, report_size)
        self._checked: Catalog | None = None  # the routes last checked (see _catalog)
        self._compiled = tuple(
            Compiled(r, self.default_key, self.headers, self.denied, self.clock) for r in self.rules
        )
        self._unfiltered = all(c.unfiltered for c in self._compiled)
        # Every rule applies to every request, reads its identity from the scope alone, costs
        # a fixed amount and enforces: decide_asgi may answer for evaluate.
        self.plain_asgi = resolver is None and all(c.plain for c in self._compiled)
        # decide_asgi's shortcut: the one rule of a plain_asgi rule set.
        self._single = self._compiled[0] if self.plain_asgi and len(self._compiled) == 1 else None
        self._routes = RouteRules(
            self._compiled, self.default_key, self.headers, self.denied, self.clock
        )

    # --- evaluation --------------------------------------------------------

    def applicable(
        self, request: RequestInfo, resolver: Resolver | None = None
    ) -> tuple[Compiled, ...]:
        """The compiled rules that apply to ``request``, in evaluation order (kill switch aside).

        Empty when none does: the middleware then passes the request on untouched.
        ``resolver`` is the middleware's default; the rule set's own wins.
        """
        resolver = self.resolver or resolver
        if resolver is None:
            return self._global(request)
        catalog = route_catalog(resolver, request)
        if catalog is not None and catalog is not self._checked:
            self._checked = checked(catalog, (r.name for r in self.rules))
        endpoint = resolver(request)
        meta = route_limits(endpoint) if endpoint is not None else None
        return self._global(request) if meta is None else self._routes.resolve(meta, request)

    def _global(self, request: RequestInfo) -> tuple[Compiled, ...]:
        if self._unfiltered:
            return self._compiled
        return tuple(c for c in self._compiled if c.rule.matches(request))

    def enforces(self, rules: Sequence[Compiled]) -> bool:
        """Whether any of ``rules`` is enforced now (neither switched off nor in shadow mode)."""
        disabled, switched = self._disabled, self._shadow
        return any(
            rule.name not in disabled and not switched.get(rule.name, rule.shadow) for rule in rules
        )

    def evaluate(self, request: RequestInfo, resolver: Resolver | None = None) -> Evaluation:
        """Yield a ``Hit`` per applicable rule, receive its Decision, return the ``Outcome``.

        ``resolver`` is the middleware's default for finding the endpoint; the
        rule set's own ``resolver``, when given, wins.
        """
        return self.run(request, self.applicable(request, resolver))

    def run(
        self,
        request: RequestInfo,
        rules: Sequence[Compiled],
        failure: FailureAnswer | None = None,
    ) -> Evaluation:
        """``evaluate`` over rules already found by ``applicable``.

        ``failure``: the middleware's failure mode (its ``FailureAnswer``), when the
        limiter takes it with each hit; a decision it made (``degraded``) ends the
        evaluation with its answer.
        """
        disabled = self._disabled
        switched = self._shadow
        enforced: list[tuple[Compiled, str, Decision]] = []
        for rule in rules:
            if disabled and rule.name in disabled:
                continue
            hit = self._hit(rule, request, switched)
            decision = yield hit
            if failure is not None and decision.degraded:
                return failure.answer(decision, self.enforces(rules))
            if self._settle(rule, hit, decision, enforced):
                break
        return self._outcome(enforced, request)

    def decide(
        self,
        request: RequestInfo,
        rules: Sequence[Compiled],
        limit: HitNow,
        failure: FailureAnswer | None = None,
    ) -> Outcome:
        """``run`` over a limiter that answers at once (``limit(key, rates, cost, shadow=)``):
        the synchronous middleware's, and the asyncio one's when its limiter decides in
        this process (``hit_now``). Each hit carries ``failure`` when given."""
        return drive(self.run(request, rules, failure), limit, failure)

    def decide_asgi(
        self, scope: Mapping[str, Any], limit: HitNow, failure: FailureAnswer | None = None
    ) -> AsgiAnswer:
        """``decide`` straight from an ASGI scope, or None when it cannot answer for it.

        It answers when the rule set is ``plain_asgi`` and no rule is switched off or
        into shadow mode at runtime; the caller checks the route (no decorated
        endpoint). No ``RequestInfo`` is made: the rules' extractors read the scope.
        A request the only rule allows under the default header plan gets its headers
        already encoded for ASGI (a list of byte pairs) rather than an ``Outcome``.
        """
        return self.scope_decider(limit, failure)(scope)

    def scope_decider(
        self, limit: HitNow, failure: FailureAnswer | None = None
    ) -> Callable[[Mapping[str, Any]], AsgiAnswer]:
        """``decide_asgi`` with ``limit`` and ``failure`` bound once, for a middleware to
        call per request: a one-rule set's whole scope path is this one function."""
        single = self._single
        if single is None:

            def decide_all(scope: Mapping[str, Any]) -> AsgiAnswer:
                if self._disabled or self._shadow:
                    return None
                return drive(self._scope_run(scope, failure), limit, failure)

            return decide_all
        scope_key: Any = single.scope_key
        rates, cost, asgi = single.rates, single.fixed_cost, single.headers.asgi
        hit: Any = limit
        mode, report = (None, None) if failure is None else (failure.failure_mode, failure.report)

        def decide_one(scope: Mapping[str, Any]) -> AsgiAnswer:
            if self._disabled or self._shadow:
                return None
            key = scope_key(scope)
            if failure is None:
                decision = hit(key, rates, cost)
            else:
                decision = hit(key, rates, cost, failure_mode=mode, on_failure=report)
                if decision.degraded:
                    return failure.answer(decision)
            if decision.allowed:
                found = asgi(decision)
                if found is not None:
                    return found
            return self._outcome([(single, key, decision)], scope)

        return decide_one

    async def decide_asgi_async(
        self,
        scope: Mapping[str, Any],
        limiter: AsyncHitter,
        failure: FailureAnswer | None = None,
    ) -> AsgiAnswer:
        """``decide_asgi`` over a limiter that is awaited (a store over the network)."""
        if self._disabled or self._shadow:
            return None
        single = self._single
        if single is None:
            return await drive_async(self._scope_run(scope, failure), limiter, failure)
        key = single.scope_key(scope)  # type: ignore[misc]
        hit: Any = limiter.hit
        if failure is None:
            decision = await hit(key, single.rates, single.fixed_cost)
        else:
            decision = await hit(
                key,
                single.rates,
                single.fixed_cost,
                failure_mode=failure.failure_mode,
                on_failure=failure.report,
            )
        return self._answer(single, key, decision, failure, scope)

    def _scope_run(self, scope: Mapping[str, Any], failure: FailureAnswer | None) -> Evaluation:
        """``run`` for a ``plain_asgi`` rule set, every key read from the scope."""
        enforced: list[tuple[Compiled, str, Decision]] = []
        for rule in self._compiled:
            key = rule.scope_key(scope)  # type: ignore[misc]
            decision = yield key, rule.rates, rule.fixed_cost, False  # type: ignore[misc]
            if failure is not None and decision.degraded:
                return failure.answer(decision)
            enforced.append((rule, key, decision))
            if not decision.allowed:
                break
        return self._outcome(enforced, scope)

    def _answer(
        self,
        rule: Compiled,
        key: str,
        decision: Decision,
        failure: FailureAnswer | None,
        scope: Mapping[str, Any],
    ) -> AsgiAnswer:
        """The one rule's decision: its ASGI headers when allowed under the default plan."""
        if failure is not None and decision.degraded:
            return failure.answer(decision)
        if decision.allowed:
            found = rule.headers.asgi(decision)
            if found is not None:
                return found
        return self._outcome([(rule, key, decision)], scope)

    @staticmethod
    def _hit(rule: Compiled, request: RequestInfo, switched: dict[str, bool]) -> Hit:
        found = rule.key(request) or rule.fallback
        try:
            key = rule.prefix + found
        except TypeError:
            raise key_returned(f"rule {rule.name!r}", found) from None
        shadow = switched.get(rule.name, rule.shadow) if switched else rule.shadow
        cost = rule.fixed_cost
        if cost is None:
            cost = rule.cost(request)
        return key, rule.rates, cost, shadow

    def _settle(
        self,
        rule: Compiled,
        hit: Hit,
        decision: Decision,
        enforced: list[tuple[Compiled, str, Decision]],
    ) -> bool:
        """Note ``rule``'s decision; True when it denied and evaluation stops there."""
        if hit[3]:
            if decision.shadowed or not decision.allowed:
                self._shadow_log.record(rule.name, hit[0], self.clock.now())
            return False
        enforced.append((rule, hit[0], decision))
        return not decision.allowed

    def _outcome(
        self,
        enforced: list[tuple[Compiled, str, Decision]],
        source: RequestInfo | Mapping[str, Any],
    ) -> Outcome:
        """The request's answer from its enforced decisions; ``source``: the request, or the
        ASGI scope it is read from when a rule's ``denied`` callable asks for it."""
        if not enforced:
            return PASS
        rule, key, decision = enforced[0] if len(enforced) == 1 else min(enforced, key=binding)
        partition = None
        if self.headers.partition_key:
            partition = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()[:12]
        now = self.clock.now() if self.headers.reset == "epoch" else 0.0
        found = rule.headers.render(decision, now, partition)
        if decision.allowed:
            passed: Outcome = Passed(tuple(found))  # type: ignore[assignment]
            return passed
        retry = rl_headers.retry_after_seconds(decision, self.headers)
        if rule.denied is not None:
            return rule.denied.outcome(rule.name, key, decision, retry, found, source)
        body = rl_headers.problem_body(rule.name, retry)
        return Outcome(True, (*found, *rl_headers.denied_headers(retry, body)), body)
