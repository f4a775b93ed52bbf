"""ShouldRateLimit without a transport: a ``RateLimitRequest`` in, a ``RateLimitResponse`` out.

``RateLimitService(config, store)`` answers over a sync ``Store``,
``AsyncRateLimitService`` over an ``AsyncStore``. Both share everything but the
store calls: the decision is written once, as a generator that yields batches of
store calls and receives their replies (``_ServiceBase._flow``); each class
drives it with a short loop.

How one request is decided
--------------------------
1. Each descriptor is matched against the config (``config.DomainConfig.match``);
   Envoy's per-descriptor ``limit`` replaces the configured limit; ``replaces``
   drops the limits named by any other matched rule of the same request.
2. Each remaining limited descriptor is one store call on its own counter key
   (domain + entries, length-prefixed: no value can alias another descriptor),
   with all of its limits in that one call, so they are all-or-nothing. A
   ``budget`` rule's call goes to ``self.budgets`` instead: a check on hits 0,
   a charge of tokens already spent (never refused) otherwise.
3. Charging: by default a request that is denied consumes nothing. With several
   descriptors the service first checks every counter without consuming (cost
   0); only if no enforcing descriptor would deny does it charge them all. When
   one would deny, only the predicted denials are re-run at full cost, for their
   exact retry times (a denial writes nothing). Between the check and the charge
   another request may slip in; then a charge can still deny after others were
   charged. One descriptor is always decided in one atomic call.
   ``charge_denied=True`` is envoyproxy/ratelimit's old behaviour: every
   descriptor is charged on its own, whatever the others decide.
4. The overall code is OVER_LIMIT when any regular descriptor is over, or when
   every ``quota_mode`` descriptor is over; ``shadow_mode`` rules report OK; the
   global ``shadow`` switch makes the overall code OK and changes nothing else
   (counters move exactly as they would when enforcing).
5. When the store fails, the rule's ``failure_mode`` decides: ``open`` allows,
   ``closed`` denies, ``local`` decides on an in-process ``MemoryStore``. No
   store error escapes. With a ``CircuitBreaker`` (``ratewarden serve`` always
   has one), an outage costs a few timeouts, not one per descriptor: while the
   breaker is open, calls go straight to the failure mode without touching the
   store, and one probe per cool-down checks whether the store is back.
6. A descriptor the store denied is remembered until its retry time (the
   over-limit cache, as envoyproxy/ratelimit's local cache): until then the same
   counter, asked for at least the same hits, is denied in-process without a
   store call. Only time frees a denied counter (other gateways only use more),
   so the answer is the one the store would give. A config reload empties it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass, replace
from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]
from google.protobuf import struct_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.budgets.envoy import AsyncRuleBudgets, RuleBudgets
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.metrics import LogRateLimiter
from ratewarden.rate import Rate
from ratewarden.server._status import current, duration, override
from ratewarden.server._values import ValueCap
from ratewarden.server.config import Match, RateLimitConfig, Rule
from ratewarden.server.headers import HEADER_MODES, response_headers
from ratewarden.storage import AsyncStore, Store
from ratewarden.storage.memory import MemoryStore
from ratewarden.tiers import CircuitBreaker, NegativeCache

__all__ = [
    "UNLIMITED_REMAINING",
    "AsyncRateLimitService",
    "DescriptorOutcome",
    "RateLimitService",
    "ServiceHooks",
    "counter_key",
]

log = logging.getLogger(__name__)

_Response = rls_pb2.RateLimitResponse
_OK = _Response.OK
_OVER_LIMIT = _Response.OVER_LIMIT
#: ``limit_remaining`` of an ``unlimited`` rule, as envoyproxy/ratelimit reports it.
UNLIMITED_REMAINING = 2**32 - 1
# The fallback store of failure_mode: local only sees this process's traffic; keep it small.
_LOCAL_MAX_KEYS = 100_000


def counter_key(domain: str, parts: Iterable[tuple[str, str]]) -> str:
    """The store key of one descriptor: ``rls/`` then length-prefixed fields.

    ``parts`` are ``(key, marked value)`` pairs where the value is ``=`` + the
    request's value, or ``*`` + the config pattern when ``share_threshold`` makes
    every matching value share one counter. Every field is written as
    ``<length>:<text>``, so the key can be read back unambiguously: no value, however
    many separators it holds, can make two descriptors share a counter.
    """
    fields = [domain]
    for key, marked in parts:
        fields.append(key)
        fields.append(marked)
    return "rls/" + "/".join(f"{len(text)}:{text}" for text in fields)


@dataclass(frozen=True, slots=True)
class DescriptorOutcome:
    """What happened to one request descriptor that had a rule; given to ``ServiceHooks``.

    - ``metric_key``: envoyproxy/ratelimit's stats key (``domain.key_value.key``),
      with request values where ``detailed_metric`` or ``value_to_metric`` ask.
    - ``hits``: the descriptor's hits_addend (0 for a check).
    - ``over_limit``: the limit said no (before shadow mode).
    - ``shadowed``: over the limit, but reported OK because of ``shadow_mode``.
    - ``near_limit_hits``: hits that landed above ``near_limit_ratio`` of the limit.
    - ``failure``: the failure mode that decided because the store failed, else None.
    - ``charged``: the hits were consumed.
    - ``decision``: the store's Decision (None for unlimited, a 0 limit, or open/closed).
    - ``entries``: the request descriptor's ``(key, value)`` entries, in order.
    - ``local_cache``: denied from the over-limit cache, without a store call.
    """

    domain: str
    metric_key: str
    rule: Rule
    hits: int
    over_limit: bool
    shadowed: bool
    near_limit_hits: int
    failure: str | None
    charged: bool
    decision: Decision | None
    entries: tuple[tuple[str, str], ...] = ()
    local_cache: bool = False


class ServiceHooks:
    """Instrumentation callbacks; subclass and override what you count.

    Called synchronously on the request path, after the response is built.
    An exception raised by a hook is logged and swallowed: metrics never change
    an answer.
    """

    def on_decision(self, domain: str, rule: Rule, outcome: DescriptorOutcome) -> None:
        """Once per request descriptor that had a rule (after replaces and overrides)."""

    def on_store_error(self, domain: str, rule: Rule, error: Exception) -> None:
        """The store failed for this rule; ``rule.failure_mode`` decides instead."""

    def on_store_call(self, seconds: float) -> None:
        """One store call (one descriptor's hit) took ``seconds``, failed or not."""

    def on_value_overflow(self, domain: str, rule: Rule) -> None:
        """A new value past ``max_values_per_rule`` was counted on the rule's overflow counter."""


@dataclass(slots=True)
class _Result:
    allowed: bool
    decision: Decision | None
    failure: str | None
    charged: bool
    cached: bool = False


@dataclass(frozen=True, slots=True)
class _Cached:
    """A store denial answered again from the over-limit cache."""

    decision: Decision


@dataclass(slots=True)
class _Item:
    """One request descriptor while its request is decided."""

    entries: tuple[tuple[str, str], ...]
    cost: int
    match: Match | None
    rule: Rule | None
    override: bool = False
    key: str = ""
    metric_key: str = ""
    result: _Result | None = None

    @property
    def needs_store(self) -> bool:
        rule = self.rule
        return rule is not None and not rule.unlimited and not rule.always_over

    @property
    def over(self) -> bool:
        if self.rule is None or self.rule.unlimited:
            return False
        if self.rule.always_over:
            return True
        return self.result is not None and not self.result.allowed


@dataclass(frozen=True, slots=True)
class _Call:
    item: _Item
    cost: int


_Reply = Decision | _Cached | Exception
_Replies = list[_Reply]
_Flow = Generator[list[_Call], _Replies, Any]


class _ServiceBase:
    def __init__(
        self,
        config: RateLimitConfig,
        clock: Clock,
        *,
        shadow: bool,
        charge_denied: bool,
        near_limit_ratio: float,
        response_headers: str,
        hooks: ServiceHooks | None,
        max_values_per_rule: int | None,
        breaker: CircuitBreaker | None,
        over_limit_cache: int,
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
        self._config = config
        self.clock = clock
        self.shadow = bool(shadow)
        self.charge_denied = bool(charge_denied)
        self.near_limit_ratio = float(near_limit_ratio)
        self.response_headers = response_headers
        self.hooks = hooks if hooks is not None else ServiceHooks()
        self._local = MemoryStore(clock=clock, max_keys=_LOCAL_MAX_KEYS)
        self._store_log = LogRateLimiter(60.0, clock=clock)
        self.values = ValueCap(max_values_per_rule, clock)
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigurationError(f"breaker {breaker!r} is not a CircuitBreaker")
        self.breaker = breaker
        if isinstance(over_limit_cache, bool) or not isinstance(over_limit_cache, int):
            raise ConfigurationError(
                f"over_limit_cache {over_limit_cache!r} must be a whole number of keys (0: off)"
            )
        self.over_limit_cache = NegativeCache(over_limit_cache) if over_limit_cache > 0 else None

    @property
    def config(self) -> RateLimitConfig:
        return self._config

    def swap_config(self, config: RateLimitConfig) -> None:
        """Serve ``config`` from the next request on; a request in flight keeps its own."""
        if not isinstance(config, RateLimitConfig):
            raise ConfigurationError(f"config {config!r} is not a RateLimitConfig; use config.load")
        self._config = config  # one reference assignment: atomic for every reader
        self.values.keep_only(config.rules)
        if self.over_limit_cache is not None:  # a limit may have grown: ask the store again
            self.over_limit_cache = NegativeCache(self.over_limit_cache.max_keys)

    # -- the decision, written once

    def _flow(self, request: Any) -> _Flow:
        items = self._prepare(request)
        stored = [item for item in items if item.needs_store]
        if stored:
            if _denied(items):
                # A limit of 0 already denies: look, but charge nothing.
                yield from self._run([(item, 0) for item in stored])
            elif self.charge_denied or len(stored) == 1:
                yield from self._run([(item, item.cost) for item in stored])
            else:
                yield from self._check_then_charge(items, stored)
        return self._respond(request.domain, items)

    def _run(self, calls: list[tuple[_Item, int]]) -> _Flow:
        if not calls:
            return
        replies = yield [_Call(item, cost) for item, cost in calls]
        for (item, cost), reply in zip(calls, replies, strict=True):
            item.result = self._settle(item, reply, cost)

    def _check_then_charge(self, items: list[_Item], stored: list[_Item]) -> _Flow:
        yield from self._run([(item, 0) for item in stored])
        # Several descriptors may share a counter: each needs room for all of them.
        demand: dict[tuple[str, str, tuple[Rate, ...]], int] = {}
        for item in stored:
            ident = _ident(item)
            demand[ident] = demand.get(ident, 0) + item.cost
        short = {
            id(item) for item in stored if item.cost > 0 and _short(item, demand[_ident(item)])
        }
        charge = [item for item in stored if item.cost > 0]
        if not _denied(items, lambda item: id(item) in short):
            yield from self._run([(item, item.cost) for item in charge])
            return
        # Denied: re-run the descriptors that are short on their own at full cost,
        # for their exact retry times (a denial consumes nothing). One that fits
        # alone but not with its twins on the same counter is over as checked:
        # re-running it would charge it.
        alone = {id(item) for item in charge if id(item) in short and _short(item, item.cost)}
        for item in charge:
            if id(item) in short and id(item) not in alone:
                assert item.result is not None
                item.result.allowed = False
        yield from self._run([(item, item.cost) for item in charge if id(item) in alone])
        # If a re-run passes after all (another request freed room in between),
        # the request may pass: then charge the rest too.
        if not _denied(items):
            yield from self._run([(item, item.cost) for item in charge if id(item) not in short])

    def _prepare(self, request: Any) -> list[_Item]:
        if not request.domain:
            raise ConfigurationError(
                "RateLimitRequest.domain is empty; Envoy sets it from the filter's domain"
            )
        if not request.descriptors:
            raise ConfigurationError("RateLimitRequest has no descriptors; send at least one")
        config = self._config  # one snapshot for the whole request
        domain = config.domains.get(request.domain)
        request_hits = request.hits_addend or 1
        items: list[_Item] = []
        for descriptor in request.descriptors:
            entries = tuple((entry.key, entry.value) for entry in descriptor.entries)
            cost = (
                descriptor.hits_addend.value if descriptor.HasField("hits_addend") else request_hits
            )
            match = domain.match(entries) if domain is not None else None
            item = _Item(entries, cost, match, None if match is None else match.rule)
            if domain is not None and descriptor.HasField("limit"):
                given = override(request.domain, entries, item.rule, descriptor.limit)
                if given is not None:
                    item.rule, item.override = given, True
            items.append(item)
        replaced = {name for item in items if item.rule for name in item.rule.replaces}
        for item in items:
            if item.rule is not None and item.rule.name and item.rule.name in replaced:
                item.rule = None  # replaced for this request: not checked, not consumed
            if item.rule is not None:
                item.key, item.metric_key = _keys(request.domain, item)
                self._cap(item)
        return items

    def _cap(self, item: _Item) -> None:
        """Past ``max_values_per_rule``, a new value shares the rule's overflow counter."""
        rule = item.rule
        if rule is None or not item.needs_store:
            return
        item.key, overflowed = self.values.key(rule, item.key, override=item.override)
        if not overflowed:
            return
        self._store_log.log(
            log,
            logging.WARNING,
            "overflow " + rule.path,
            "rule %s holds %d distinct values; new ones share one overflow counter",
            rule.path,
            self.values.limit,
        )
        try:
            self.hooks.on_value_overflow(rule.domain, rule)
        except Exception:
            log.exception("hook on_value_overflow failed; the answer is unaffected")

    def _settle(self, item: _Item, reply: _Reply, cost: int) -> _Result:
        if isinstance(reply, _Cached):
            return _Result(False, reply.decision, None, False, cached=True)
        if isinstance(reply, Decision):
            return _Result(reply.allowed, reply, None, reply.allowed and cost > 0)
        rule = item.rule
        assert rule is not None
        if isinstance(reply, StorageError):
            # An outage fails every call: one line per error kind per minute, with a count.
            self._store_log.log(
                log,
                logging.WARNING,
                type(reply).__name__,
                "store failed (%s); failure_mode %s answers for %s",
                reply,
                rule.failure_mode,
                rule.path,
            )
        else:
            log.warning("store call for %s raised unexpectedly", rule.path, exc_info=reply)
        try:
            self.hooks.on_store_error(rule.domain, rule, reply)
        except Exception:
            log.exception("hook on_store_error failed; the answer is unaffected")
        if rule.failure_mode == "local":
            decision = self._local.hit(rule.algorithm, item.key, rule.rates, cost)
            return _Result(decision.allowed, decision, "local", decision.allowed and cost > 0)
        allowed = rule.failure_mode == "open"
        return _Result(allowed, None, rule.failure_mode, False)

    def _cached(self, call: _Call) -> _Cached | None:
        """The remembered denial that still answers this call, if any (no store call then)."""
        cache = self.over_limit_cache
        if cache is None:
            return None
        rule = call.item.rule
        assert rule is not None
        now_us = self.clock.now_us()
        # A check (cost 0) asks on behalf of the descriptor's own hits.
        denial = cache.lookup((rule.algorithm, call.item.key, rule.rates), call.item.cost, now_us)
        if denial is None:
            return None
        elapsed = (now_us - denial.at_us) / 1_000_000
        decision = denial.decision
        return _Cached(
            replace(
                decision,
                retry_after=max(0.0, decision.retry_after - elapsed),
                reset_after=max(0.0, decision.reset_after - elapsed),
            )
        )

    def _remember(self, call: _Call, reply: Decision | Exception) -> None:
        cache = self.over_limit_cache
        if cache is None or not isinstance(reply, Decision) or reply.allowed or call.cost <= 0:
            return
        rule = call.item.rule
        assert rule is not None
        cache.remember((rule.algorithm, call.item.key, rule.rates), reply, self.clock.now_us())

    def _refused(self) -> StorageUnavailableError | None:
        """The error standing in for a store call the open breaker does not let through."""
        if self.breaker is None or self.breaker.allow():
            return None
        return StorageUnavailableError(
            f"circuit breaker open after store failures; next probe in "
            f"{self.breaker.retry_in():.3f}s"
        )

    def _verdict(self, reply: Decision | Exception) -> None:
        """Tell the breaker how a call it let through went."""
        if self.breaker is None:
            return
        if isinstance(reply, Decision):
            self.breaker.success()
        elif isinstance(reply, StorageError):
            self.breaker.failure()
        else:
            self.breaker.abandon()  # a bug, not an outage: no verdict on the store

    def _timed(self, seconds: float) -> None:
        try:
            self.hooks.on_store_call(seconds)
        except Exception:
            log.exception("hook on_store_call failed; the answer is unaffected")

    # -- the response

    def _respond(self, domain: str, items: list[_Item]) -> Any:
        response = _Response()
        metadata: dict[str, Any] = {}
        windows: list[int | None] = []
        for item in items:
            status = response.statuses.add()
            passing, window = self._status(item, status)
            windows.append(window)
            if passing and item.match is not None and item.match.node.metadata:
                metadata.update(item.match.node.metadata_dict())
        denied = _denied(items)
        response.overall_code = _OK if self.shadow or not denied else _OVER_LIMIT
        for name, value in response_headers(self.response_headers, response.statuses, windows):
            response.response_headers_to_add.add(key=name, value=value)
        if metadata:
            struct = struct_pb2.Struct()
            struct.update(metadata)
            response.dynamic_metadata.CopyFrom(struct)
        for item in items:
            if item.rule is None:
                continue
            try:
                self.hooks.on_decision(domain, item.rule, self._outcome(domain, item))
            except Exception:
                log.exception("hook on_decision failed; the answer is unaffected")
        return response

    def _status(self, item: _Item, status: Any) -> tuple[bool, int | None]:
        """Fill one DescriptorStatus: (it reports OK, its window in seconds for headers).

        The window is None when there is no limit to report in headers: no rule,
        ``unlimited``, or a failure mode that answered without a decision.
        """
        rule = item.rule
        if rule is None:
            status.code = _OK
            return True, None
        if rule.unlimited:
            status.code = _OK
            status.limit_remaining = UNLIMITED_REMAINING
            return True, None
        ok = not item.over or rule.shadow_mode
        status.code = _OK if ok else _OVER_LIMIT
        if rule.always_over:
            zero = next(limit for limit in rule.limits if limit.rate is None)
            current(status, zero, rule.name)
            period = zero.period_us
            duration(status, period - self.clock.now_us() % period)
            return ok, _seconds(period)
        result = item.result
        assert result is not None
        decision = result.decision
        limit = rule.limit_for(None if decision is None else decision.rate)
        current(status, limit, rule.name)
        if decision is None or limit is None:
            return ok, None
        status.limit_remaining = min(max(decision.remaining, 0), UNLIMITED_REMAINING)
        wait = decision.reset_after
        if not decision.allowed and math.isfinite(decision.retry_after):
            wait = decision.retry_after
        duration(status, round(wait * 1_000_000) if math.isfinite(wait) else 0)
        return ok, _seconds(limit.period_us)

    def _outcome(self, domain: str, item: _Item) -> DescriptorOutcome:
        rule = item.rule
        assert rule is not None
        result = item.result
        decision = None if result is None else result.decision
        over = item.over
        return DescriptorOutcome(
            domain=domain,
            metric_key=item.metric_key,
            rule=rule,
            hits=item.cost,
            over_limit=over,
            shadowed=over and rule.shadow_mode,
            near_limit_hits=0 if over else self._near_limit_hits(decision, item.cost),
            failure=None if result is None else result.failure,
            charged=result is not None and result.charged,
            decision=decision,
            entries=item.entries,
            local_cache=result is not None and result.cached,
        )

    def _near_limit_hits(self, decision: Decision | None, hits: int) -> int:
        if decision is None or decision.rate is None or not decision.allowed:
            return 0
        capacity = decision.rate.capacity
        threshold = math.floor(capacity * self.near_limit_ratio)
        used_after = capacity - decision.remaining
        used_before = used_after - hits
        return max(0, used_after - max(threshold, used_before))


class RateLimitService(_ServiceBase):
    """ShouldRateLimit over a synchronous ``Store`` (``MemoryStore``, ``RedisStore``)."""

    def __init__(
        self,
        config: RateLimitConfig,
        store: Store,
        *,
        clock: Clock | None = None,
        shadow: bool = False,
        charge_denied: bool = False,
        near_limit_ratio: float = 0.8,
        response_headers: str = "off",
        hooks: ServiceHooks | None = None,
        max_values_per_rule: int | None = None,
        breaker: CircuitBreaker | None = None,
        over_limit_cache: int = 0,
    ) -> None:
        super().__init__(
            config,
            clock if clock is not None else store.clock,
            shadow=shadow,
            charge_denied=charge_denied,
            near_limit_ratio=near_limit_ratio,
            response_headers=response_headers,
            hooks=hooks,
            max_values_per_rule=max_values_per_rule,
            breaker=breaker,
            over_limit_cache=over_limit_cache,
        )
        self.store = store
        self.budgets = RuleBudgets(store)

    def should_rate_limit(self, request: Any) -> Any:
        """Decide a ``RateLimitRequest`` into a ``RateLimitResponse``; store failures never raise.

        Raises ``ConfigurationError`` for a malformed request (no domain, no descriptors).
        """
        flow = self._flow(request)
        try:
            calls = next(flow)
            while True:
                calls = flow.send([self._hit(call) for call in calls])
        except StopIteration as done:
            return done.value

    def _hit(self, call: _Call) -> _Reply:
        rule = call.item.rule
        assert rule is not None
        cached = self._cached(call)
        if cached is not None:
            return cached
        refused = self._refused()
        if refused is not None:
            return refused
        started = time.perf_counter()
        reply: Decision | Exception
        try:
            if rule.budget:  # a token budget: checked on hits 0, charged otherwise
                reply = self.budgets.hit(rule.rates[0], call.item.key, call.item.cost, call.cost)
            else:
                reply = self.store.hit(rule.algorithm, call.item.key, rule.rates, call.cost)
        except Exception as exc:  # every store failure is a policy decision, never a crash
            reply = exc
        self._timed(time.perf_counter() - started)
        self._verdict(reply)
        self._remember(call, reply)
        return reply

    def __repr__(self) -> str:
        return (
            f"RateLimitService({self.store!r}, shadow={self.shadow}, "
            f"charge_denied={self.charge_denied})"
        )


class AsyncRateLimitService(_ServiceBase):
    """The asyncio twin of ``RateLimitService`` over an ``AsyncStore``.

    The store calls of one step run concurrently (one ``asyncio.gather``).
    """

    def __init__(
        self,
        config: RateLimitConfig,
        store: AsyncStore,
        *,
        clock: Clock | None = None,
        shadow: bool = False,
        charge_denied: bool = False,
        near_limit_ratio: float = 0.8,
        response_headers: str = "off",
        hooks: ServiceHooks | None = None,
        max_values_per_rule: int | None = None,
        breaker: CircuitBreaker | None = None,
        over_limit_cache: int = 0,
    ) -> None:
        super().__init__(
            config,
            clock if clock is not None else store.clock,
            shadow=shadow,
            charge_denied=charge_denied,
            near_limit_ratio=near_limit_ratio,
            response_headers=response_headers,
            hooks=hooks,
            max_values_per_rule=max_values_per_rule,
            breaker=breaker,
            over_limit_cache=over_limit_cache,
        )
        self.store = store
        self.budgets = AsyncRuleBudgets(store)

    async def should_rate_limit(self, request: Any) -> Any:
        """See ``RateLimitService.should_rate_limit``."""
        flow = self._flow(request)
        try:
            calls = next(flow)
            while True:
                if len(calls) == 1:  # no Task for a lone call: most requests have one
                    replies = [await self._hit(calls[0])]
                else:
                    replies = list(await asyncio.gather(*(self._hit(call) for call in calls)))
                calls = flow.send(replies)
        except StopIteration as done:
            return done.value

    async def _hit(self, call: _Call) -> _Reply:
        rule = call.item.rule
        assert rule is not None
        cached = self._cached(call)
        if cached is not None:
            return cached
        refused = self._refused()
        if refused is not None:
            return refused
        started = time.perf_counter()
        reply: Decision | Exception
        try:
            if rule.budget:  # a token budget: checked on hits 0, charged otherwise
                budgets = self.budgets
                reply = await budgets.hit(rule.rates[0], call.item.key, call.item.cost, call.cost)
            else:
                reply = await self.store.hit(rule.algorithm, call.item.key, rule.rates, call.cost)
        except asyncio.CancelledError:
            if self.breaker is not None:
                self.breaker.abandon()
            raise
        except Exception as exc:  # every store failure is a policy decision, never a crash
            reply = exc
        self._timed(time.perf_counter() - started)
        self._verdict(reply)
        self._remember(call, reply)
        return reply

    def __repr__(self) -> str:
        return (
            f"AsyncRateLimitService({self.store!r}, shadow={self.shadow}, "
            f"charge_denied={self.charge_denied})"
        )


# ---------------------------------------------------------------- helpers


def _denied(items: list[_Item], predicted: Any = None) -> bool:
    """Any regular descriptor over, or every quota_mode one over; shadow rules never deny."""
    quota = quota_over = 0
    for item in items:
        rule = item.rule
        if rule is None or rule.unlimited or rule.shadow_mode:
            continue
        over = item.over or (predicted is not None and predicted(item))
        if rule.quota_mode:
            quota += 1
            quota_over += over
        elif over:
            return True
    return quota > 0 and quota_over == quota


def _seconds(microseconds: int) -> int:
    return -(-microseconds // 1_000_000)


def _ident(item: _Item) -> tuple[str, str, tuple[Rate, ...]]:
    assert item.rule is not None
    return item.rule.algorithm, item.key, item.rule.rates


def _short(item: _Item, demand: int) -> bool:
    """Whether a checked (cost 0) counter lacks room for ``demand`` hits."""
    result = item.result
    assert result is not None
    if result.decision is None or (item.rule is not None and item.rule.budget):
        return not result.allowed  # a budget charge records tokens already spent: never short
    return not result.allowed or result.decision.remaining < demand


def _keys(domain: str, item: _Item) -> tuple[str, str]:
    """The counter key and the metric key of a descriptor with a rule."""
    rule = item.rule
    assert rule is not None
    match = item.match
    request_key = ".".join(f"{key}_{value}" if value else key for key, value in item.entries)
    if match is None or item.override:  # Envoy's limit override: counted per exact descriptor
        return counter_key(
            domain, ((k, "=" + v) for k, v in item.entries)
        ), f"{domain}.{request_key}"
    parts: list[tuple[str, str]] = []
    metric = [domain]
    for (key, value), node in zip(item.entries, match.nodes, strict=True):
        shared = node.share_threshold and not node.exact
        parts.append((key, ("*" + node.value) if shared else ("=" + value)))
        if node.value_to_metric and not node.exact:
            metric.append(f"{key}_{value}" if value else key)
        else:
            metric.append(f"{node.key}_{node.value}" if node.value else node.key)
    if rule.detailed_metric:
        return counter_key(domain, parts), f"{domain}.{request_key}"
    return counter_key(domain, parts), ".".join(metric)
