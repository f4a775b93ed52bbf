"""ShouldRateLimit without a transport: a ``RateLimitRequest`` in, a ``RateLimitResponse`` out.

``RateLimitService(config, store)`` answers over a sync ``Store``,
``AsyncRateLimitService`` over an ``AsyncStore``. Each builds a limiter over its
store (``Limiter`` / ``AsyncLimiter``, with the service's breaker and over-limit
cache) and decides through it: the decision is written once, as a flow composed
from the limiter's flows (``_ServiceBase._flow``), and each class runs it with
``limiter.run``: that one line is all that differs between the two.

The request's descriptors, prepared into items with their counter keys, are in
``server/descriptors.py``; several descriptors decided in one atomic store step,
in ``server/joint_step.py``; building the response, in ``server/response.py``;
token-budget rules, in ``server/rule_budgets.py``; the hooks and the log
lines, in ``server/hooks.py``; here, the decision flow and the mapping of the
limiter's answers onto what the service reports.

How one request is decided
--------------------------
1. Each descriptor is matched against the config (``config.DomainConfig.match``);
   Envoy's per-descriptor ``limit`` replaces the configured limit (on a descriptor no
   rule matches, it is a rule of its own, with ``default_failure_mode``); ``replaces``
   drops the limits named by any other matched rule of the same request.
2. Each remaining limited descriptor is one ``limiter.hit_flow`` on its own
   counter key (domain + entries, length-prefixed: no value can alias another),
   with all of its limits (all-or-nothing), its rule's algorithm and
   ``failure_mode``. A ``budget`` rule's call asks ``self.budgets`` in place of
   the store's ``hit``: a check on hits 0, a charge of tokens already spent
   (never refused) otherwise. The calls of one step run side by side (``Gather``).
3. Charging (``server/charging.py``): by default a denied request consumes nothing.
   A budget check (hits 0) beside other descriptors is asked first. Several descriptors
   are decided in one atomic store step when possible (``hit_all_flow``: all
   charged or none; enforcing regular rules of one algorithm, no counter twice,
   no cached denial, keys the store takes together: one slot on a Cluster).
   Otherwise every counter but a budget's charge (never over) is checked at cost 0
   (a denial the over-limit cache holds answers its own check; the other checks
   are one atomic step when they may go together) and, only if no enforcing
   descriptor would deny, all are charged; when one would deny, only the
   predicted denials are re-run at full cost, for their exact retry times. A
   request slipping in between may make a charge deny after others were charged. A
   limit of 0 denies before any store call: the others are then checked and the
   denials re-run, as when one of them denies. ``charge_denied=True`` is
   envoyproxy/ratelimit's old behaviour: each descriptor charged on its own, and a
   ``fixed_window`` one counted as upstream counts it, its denied hits too
   (``server/charged_window.py``).
4. The overall code is OVER_LIMIT when any regular descriptor is over, or when
   every ``quota_mode`` descriptor is over (with the global ``quota_mode``, every
   descriptor but an unlimited one is a quota descriptor: ``Verdict``);
   ``shadow_mode`` rules report OK; the global ``shadow`` switch makes the overall
   code OK and changes nothing else (counters move as they would when enforcing).
5. When the store fails (any exception: none escapes), the rule's
   ``failure_mode`` decides, in the limiter: ``open`` allows, ``closed`` denies
   (both with no decision to report), ``local`` decides in this process. With a
   ``CircuitBreaker`` (``ratewarden serve`` always has one), an outage costs a
   few timeouts, not one per descriptor: while it is open, calls go straight to
   the failure mode, and one probe per cool-down checks whether the store is back.
6. A descriptor the store denied is remembered until its retry time (the
   over-limit cache: the limiter's negative cache, as envoyproxy/ratelimit's
   local cache): until then the same counter, asked for at least the same hits,
   is denied in-process without a store call, a check made for those hits too.
   Only time frees a denied counter (other gateways only use more), so the
   answer is the one the store would give. A config reload empties it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ratewarden.checks import refuse_class
from ratewarden.clock import Clock
from ratewarden.errors import CircuitOpenError, ConfigurationError
from ratewarden.limiter import AsyncLimiter, CircuitBreaker, Flow, Gather, Limiter, NegativeCache
from ratewarden.server import charged_window
from ratewarden.server.charging import Charging
from ratewarden.server.config import (
    DEFAULT_FAILURE_MODE,
    FAILURE_MODES,
    RateLimitConfig,
)

# counter_key, DescriptorOutcome, UNLIMITED_REMAINING and ServiceHooks are defined
# beside what builds or uses them and re-exported here, the public place to import
# them from (__all__).
from ratewarden.server.descriptors import (
    Item,
    Result,
    counter_key,
    denied,
    prepare,
    settled,
)
from ratewarden.server.hooks import Reports, ServiceHooks
from ratewarden.server.joint_step import cached_check
from ratewarden.server.response import (
    UNLIMITED_REMAINING,
    DescriptorOutcome,
    ResponseMessage,
    respond,
)
from ratewarden.server.response_headers import HEADER_MODES, LEGACY_NAMES, check_header_names
from ratewarden.server.response_metadata import metadata_mode
from ratewarden.server.rule_budgets import AsyncRuleBudgets, RuleBudgets
from ratewarden.server.unknown_domains import UnknownDomains
from ratewarden.server.value_cap import ValueCap

if TYPE_CHECKING:
    from ratewarden.storage import AsyncStore, Store

__all__ = [
    "UNLIMITED_REMAINING",
    "AsyncRateLimitService",
    "DescriptorOutcome",
    "RateLimitService",
    "ServiceHooks",
    "counter_key",
]


class _ServiceBase(Charging):
    """Settings and the decision flow; the store is only the limiter's."""

    #: The limiter and the budget rules' adapter over this twin's kind of store.
    _LIMITER: Any
    _BUDGETS: Any
    _CHARGED: Any  # charged_window's via for this twin's kind of store
    limiter: Limiter | AsyncLimiter

    def __init__(
        self,
        config: RateLimitConfig,
        store: Store | AsyncStore,
        *,
        clock: Clock | None = None,
        shadow: bool = False,
        charge_denied: bool = False,
        near_limit_ratio: float = 0.8,
        response_headers: str = "off",
        legacy_header_names: Sequence[str] = LEGACY_NAMES,
        hooks: ServiceHooks | None = None,
        max_values_per_rule: int | None = None,
        breaker: CircuitBreaker | None = None,
        over_limit_cache: int = 0,
        response_metadata: str = "merged",
        quota_mode: bool = False,
        default_failure_mode: str = DEFAULT_FAILURE_MODE,
    ) -> None:
        if not isinstance(config, RateLimitConfig):
            raise ConfigurationError(f"config {config!r} is not a RateLimitConfig; use config.load")
        if isinstance(near_limit_ratio, bool) or not isinstance(near_limit_ratio, int | float):
            raise ConfigurationError(f"near_limit_ratio {near_limit_ratio!r} must be a number")
        if not 0 < near_limit_ratio <= 1:
            raise ConfigurationError(
                f"near_limit_ratio {near_limit_ratio!r} must be above 0 and at most 1 (e.g. 0.8)"
            )
        if response_headers not in HEADER_MODES:
            raise ConfigurationError(
                f"response_headers {response_headers!r} must be one of {', '.join(HEADER_MODES)}"
            )
        if default_failure_mode not in FAILURE_MODES:
            raise ConfigurationError(
                f"default_failure_mode {default_failure_mode!r} must be one of "
                f"{', '.join(FAILURE_MODES)}"
            )
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigurationError(f"breaker {breaker!r} is not a CircuitBreaker")
        if isinstance(over_limit_cache, bool) or not isinstance(over_limit_cache, int):
            raise ConfigurationError(
                f"over_limit_cache {over_limit_cache!r} must be a whole number of keys (0: off)"
            )
        self._config = config
        refuse_class(type(self).__name__, "store", store, needs="hit")  # before its clock is read
        self.clock = clock if clock is not None else store.clock
        self.shadow = bool(shadow)
        self.quota_mode = bool(quota_mode)
        #: The failure_mode of a limit override on a descriptor no rule matches (the rules
        #: carry their own, set at load from the same ``serve --failure-mode``).
        self.default_failure_mode = default_failure_mode
        self.charge_denied = bool(charge_denied)
        self.near_limit_ratio = float(near_limit_ratio)
        self.response_headers = response_headers
        self.response_metadata = metadata_mode(response_metadata)
        try:
            self.legacy_header_names = check_header_names(tuple(legacy_header_names))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"legacy_header_names: {exc}") from None
        self._reports = Reports(hooks if hooks is not None else ServiceHooks(), self.clock)
        self._unknown = UnknownDomains(self.clock)
        self.values = ValueCap(max_values_per_rule, self.clock)
        self.store = store
        self.limiter = self._LIMITER(
            store,
            clock=self.clock,
            breaker=breaker,
            negative_cache=NegativeCache(over_limit_cache) if over_limit_cache > 0 else None,
            metrics=self._reports,
            name="service",
        )
        # No store error escapes: a bug in a client library is a failure like an outage.
        self.limiter.failure_errors = Exception
        self.budgets = self._BUDGETS(store, self.limiter.negative)
        # charge_denied: fixed windows count denied hits too, as upstream's do (a store
        # without ``apply``, a custom one, keeps fixed_window's counting).
        charges = self.charge_denied and callable(getattr(store, "apply", None))
        self._charged = type(self)._CHARGED(store) if charges else None
        # Several keys in one store step (``hit_all``); not in quota mode: no denial holds all.
        self._joint = callable(getattr(store, "hit_all", None)) and not self.quota_mode

    @property
    def config(self) -> RateLimitConfig:
        return self._config

    @property
    def hooks(self) -> ServiceHooks:
        """What the service reports to; swap it at any time."""
        return self._reports.hooks

    @hooks.setter
    def hooks(self, hooks: ServiceHooks) -> None:
        self._reports.hooks = hooks

    @property
    def breaker(self) -> CircuitBreaker | None:
        """The circuit breaker in front of the store (the limiter's), or None."""
        return self.limiter.breaker

    @breaker.setter
    def breaker(self, breaker: CircuitBreaker | None) -> None:
        self.limiter.breaker = breaker

    @property
    def over_limit_cache(self) -> NegativeCache | None:
        """The remembered denials (the limiter's negative cache), or None when off."""
        return self.limiter.negative

    def swap_config(self, config: RateLimitConfig) -> None:
        """Serve ``config`` from the next request on; a request in flight keeps its own."""
        if not isinstance(config, RateLimitConfig):
            raise ConfigurationError(f"config {config!r} is not a RateLimitConfig; use config.load")
        self._config = config  # one reference assignment: atomic for every reader
        self.values.keep_only(config.rules)
        negative = self.limiter.negative
        if negative is not None:  # a limit may have grown: ask the store again
            self.limiter.negative = NegativeCache(negative.max_keys)
            self.budgets.denials = self.limiter.negative

    # -- the decision, written once

    def _flow(self, request: Any) -> Flow[bytes]:
        """The request decided, as its response's wire bytes."""
        config = self._config  # one snapshot for the whole request
        items = prepare(request, config, self.values, self._reports, self.default_failure_mode)
        stored: list[Item] = []
        zero = False  # a limit of 0: the only way a request is denied before any store call
        for item in items:
            if item.needs_store:
                stored.append(item)
            elif item.rule is not None and item.rule.always_over:
                zero = True
        if stored:
            if self.charge_denied:  # each on its own, whatever a limit of 0 or another says
                yield from self._run([(item, item.cost) for item in stored])
            elif zero and denied(items, quota_mode=self.quota_mode):
                # A limit of 0 already denies: the others are checked for their own hits (a
                # full counter reports its denial) and nothing is charged, as when another
                # descriptor denies.
                yield from self._check_then_charge(items, stored)
            elif len(stored) == 1:  # most requests: one call, no step around it
                stored[0].result = yield from self._decide(stored[0], stored[0].cost)
            else:
                yield from self._several(items, stored)
        response = respond(
            request.domain,
            items,
            shadow=self.shadow,
            header_mode=self.response_headers,
            header_names=self.legacy_header_names,
            near_limit_ratio=self.near_limit_ratio,
            clock=self.clock,
            on_decisions=self._reports.hooks.on_decisions,
            metadata_mode=self.response_metadata,
            request=request,
            quota_mode=self.quota_mode,
        )
        if request.domain not in config.domains:
            self._unknown.saw(request.domain, config.domains)
            self._reports.domain_not_found(request.domain, len(items))
        return response

    def _run(self, calls: list[tuple[Item, int]]) -> Flow[None]:
        """Decide each ``(item, cost)``, side by side; each item gets its ``result``."""
        if len(calls) == 1:  # no Gather (no task under asyncio)
            item, cost = calls[0]
            item.result = yield from self._decide(item, cost)
        elif calls:
            budget = [call for call in calls if call[0].rule and call[0].rule.budget]
            others = [call for call in calls if not (call[0].rule and call[0].rule.budget)]
            if len(budget) < 2:  # one budget call: its own store step, as any other call
                budget, others = [], calls
            flows: list[Flow[Any]] = [self._decide(item, cost) for item, cost in others]
            if budget:  # every budget call of the step in as few store steps as may be
                flows.append(self._budget_step(budget))
            results = yield Gather(tuple(flows))
            for (item, _), result in zip(others, results, strict=False):
                item.result = result

    def _decide(self, item: Item, cost: int) -> Flow[Result]:
        """One descriptor's call at ``cost`` (0: a check for the descriptor's own hits)."""
        rule = item.rule
        assert rule is not None  # every item the store decides has one
        limiter = self.limiter
        if cost == 0:
            if rule.budget:  # a spent budget's check, remembered (a charge's look never is)
                spent = self.budgets.cached(rule.rates[0], item.key) if item.cost == 0 else None
                cached = None if spent is None else Result(False, spent, None, False, cached=True)
            else:
                cached = cached_check(item, limiter)
            if cached is not None:
                return cached
        # A token budget: checked on hits 0, charged otherwise. With charge_denied a fixed
        # window counts its denied hits too.
        if rule.budget:
            via: Any = self.budgets.via(item.cost, cost)
        else:
            via = self._charged if rule.algorithm == "fixed_window" else None
        counts = limiter.counts
        calls = counts.store_calls
        errors: list[Exception] = []
        decision = yield from limiter.hit_flow(
            item.key,
            rule.rates,
            cost,
            failure_mode=rule.failure_mode,
            algorithm=rule.algorithm,
            on_failure=self._failed_hook(item, errors),
            via=via,
        )
        if decision.degraded:
            if cost > 0 and rule.budget and not via.reached:  # the store was not asked:
                self.budgets.owe(rule.rates[0], item.key, cost)  # owed (see Reached)
            result = settled(decision, cost)
            result.refused = bool(errors) and isinstance(errors[0], CircuitOpenError)
            return result
        if counts.store_calls == calls:
            # No store call and no failure mode: the over-limit cache answered (this limiter
            # has no local bucket or leases; a call to the store counts, whatever else ran).
            return Result(False, decision, None, False, cached=True)
        allowed = decision.allowed
        return Result(allowed, decision, None, allowed and cost > 0)

    def __repr__(self) -> str:
        flags = f"shadow={self.shadow}, charge_denied={self.charge_denied}"
        return f"{type(self).__name__}({self.store!r}, {flags})"


class RateLimitService(_ServiceBase):
    """ShouldRateLimit over a synchronous ``Store`` (``MemoryStore``, ``RedisStore``).

    ``RateLimitService(config, store, *, clock, shadow, charge_denied, near_limit_ratio,
    response_headers, legacy_header_names, hooks, max_values_per_rule, breaker,
    over_limit_cache, response_metadata, quota_mode, default_failure_mode)``; every option off
    (or 0.8, ``"off"``, ``"merged"``, ``"open"``) by default. ``default_failure_mode`` is the
    failure_mode of a request's limit override on a descriptor no rule matches."""

    _LIMITER = Limiter
    _BUDGETS = RuleBudgets
    _CHARGED = staticmethod(charged_window.via)
    limiter: Limiter
    budgets: RuleBudgets

    def should_rate_limit(self, request: Any) -> Any:
        """Decide a ``RateLimitRequest`` into a ``RateLimitResponse``; store failures never raise.

        Raises ``ConfigurationError`` for a malformed request (no domain, no descriptors).
        """
        return ResponseMessage.FromString(self.limiter.run(self._flow(request)))

    def should_rate_limit_wire(self, request: Any) -> bytes:
        """``should_rate_limit``'s response as its wire bytes, for a transport to send."""
        return self.limiter.run(self._flow(request))


class AsyncRateLimitService(_ServiceBase):
    """The asyncio twin of ``RateLimitService`` over an ``AsyncStore``; the same options.

    The store calls of one step run concurrently.
    """

    _LIMITER = AsyncLimiter
    _BUDGETS = AsyncRuleBudgets
    _CHARGED = staticmethod(charged_window.async_via)
    limiter: AsyncLimiter
    budgets: AsyncRuleBudgets

    async def should_rate_limit(self, request: Any) -> Any:
        """See ``RateLimitService.should_rate_limit``."""
        return ResponseMessage.FromString(await self.limiter.run(self._flow(request)))

    async def should_rate_limit_wire(self, request: Any) -> bytes:
        """See ``RateLimitService.should_rate_limit_wire``."""
        return await self.limiter.run(self._flow(request))
