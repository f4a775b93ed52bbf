"""ShouldRateLimit without a transport: a ``RateLimitRequest`` in, a ``RateLimitResponse`` out.

``RateLimitService(config, store)`` answers over a sync ``Store``,
``AsyncRateLimitService`` over an ``AsyncStore``. Both share everything but the
store calls: the decision is written once, as a generator that yields batches of
store calls and receives their replies (``_ServiceBase._flow``); each class
drives it with a short loop.

The request's descriptors, prepared into items with their counter keys, are in
``server/_service_items.py``; building the response, in
``server/_service_response.py``; here, the decision flow, its store calls and
their failure policies, and the two services.

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
   descriptors the service decides them in one atomic store step when it can
   (``_together``: the store's ``hit_all``, all charged or none; every stored
   descriptor an enforcing regular rule of one algorithm, no counter twice, no
   cached denial, and keys the store can take together, which on a Redis Cluster
   means one slot). Otherwise it first checks every counter without consuming
   (cost 0); only if no enforcing descriptor would deny does it charge them all.
   When one would deny, only the predicted denials are re-run at full cost, for
   their exact retry times (a denial writes nothing). Between that check and the
   charge another request may slip in; then a charge can still deny after others
   were charged. One descriptor is always decided in one atomic call.
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
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any

from ratewarden.budgets.envoy import AsyncRuleBudgets, RuleBudgets
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.metrics import LogRateLimiter
from ratewarden.rate import Rate

# counter_key, DescriptorOutcome and UNLIMITED_REMAINING are defined beside what
# builds them and re-exported here, the public place to import them from (__all__).
from ratewarden.server._service_items import (
    Cached,
    Call,
    Item,
    Result,
    Together,
    counter_id,
    counter_key,
    denied,
    is_short,
    prepare,
)
from ratewarden.server._service_response import UNLIMITED_REMAINING, DescriptorOutcome, respond
from ratewarden.server._values import ValueCap
from ratewarden.server.config import RateLimitConfig, Rule
from ratewarden.server.headers import HEADER_MODES
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

# The fallback store of failure_mode: local only sees this process's traffic; keep it small.
_LOCAL_MAX_KEYS = 100_000


def _rule(item: Item) -> Rule:
    """The rule of an item the store decides (every such item has one)."""
    assert item.rule is not None
    return item.rule


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


_Reply = Decision | Cached | Exception
_Replies = list[_Reply]
# A step is a list of calls (one store call each, run side by side) or one Together
# (one atomic store call); the reply to a Together is None when the store could not
# take it (a Cluster's keys on several slots), or one reply per item.
_Flow = Generator[list[Call] | Together, _Replies | None, Any]
#: A store's ``hit_all``, sync or async (see ``MemoryStore.hit_all``).
HitAll = Callable[[str, Sequence[tuple[str, tuple[Rate, ...], int]]], Any]


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
        # The store's hit_all (one atomic step for several descriptors), if it has one.
        self._store_hit_all: HitAll | None = None

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
        items = prepare(self, request)
        stored = [item for item in items if item.needs_store]
        if stored:
            if denied(items):
                # A limit of 0 already denies: look, but charge nothing.
                yield from self._run([(item, 0) for item in stored])
            elif self.charge_denied or len(stored) == 1:
                yield from self._run([(item, item.cost) for item in stored])
            else:
                together = self._together(stored)
                replies = None if together is None else (yield together)
                if replies is None:
                    yield from self._check_then_charge(items, stored)
                else:
                    self._settle_together(stored, replies)
        return respond(self, request.domain, items)

    def _run(self, calls: list[tuple[Item, int]]) -> _Flow:
        if not calls:
            return
        replies = yield [Call(item, cost) for item, cost in calls]
        assert replies is not None
        for (item, cost), reply in zip(calls, replies, strict=True):
            item.result = self._settle(item, reply, cost)

    def _together(self, stored: list[Item]) -> Together | None:
        """The one atomic store step deciding every descriptor, when the request allows one.

        That is when every stored descriptor is an enforcing regular rule (no
        shadow_mode, quota_mode or budget) of one algorithm, no two count the same
        key on the same rate, none is in the over-limit cache, and the store has
        ``hit_all``. Otherwise the request is checked, then charged.
        """
        if self._store_hit_all is None:
            return None
        algorithm = ""
        counted: set[tuple[str, Rate]] = set()
        for item in stored:
            rule = _rule(item)
            if rule.shadow_mode or rule.quota_mode or rule.budget:
                return None
            if algorithm and rule.algorithm != algorithm:
                return None
            algorithm = rule.algorithm
            for rate in rule.rates:
                if (item.key, rate) in counted:
                    return None
                counted.add((item.key, rate))
            if self._cached(Call(item, item.cost)) is not None:
                return None
        return Together(algorithm, tuple(stored))

    def _settle_together(self, stored: list[Item], replies: _Replies) -> None:
        first = replies[0]
        if isinstance(first, Exception):
            self._degrade_together(stored, first)
            return
        for item, reply in zip(stored, replies, strict=True):
            assert isinstance(reply, Decision)
            item.result = Result(reply.allowed, reply, None, reply.allowed and reply.cost > 0)

    def _degrade_together(self, stored: list[Item], error: Exception) -> None:
        """The store failed a Together: each rule's failure_mode, still all or nothing.

        ``closed`` rules deny, so then the ``local`` ones are only checked; else the
        ``local`` ones are decided together on the in-process store.
        """
        for item in stored:
            self._report(item, error)
        closed = any(_rule(item).failure_mode == "closed" for item in stored)
        local = [item for item in stored if _rule(item).failure_mode == "local"]
        decisions: dict[int, Decision] = {}
        if local:
            found = self._local.hit_all(
                _rule(local[0]).algorithm,
                [(item.key, _rule(item).rates, 0 if closed else item.cost) for item in local],
            )
            decisions = {id(item): decision for item, decision in zip(local, found, strict=True)}
        for item in stored:
            decision = decisions.get(id(item))
            if decision is not None:
                charged = decision.allowed and decision.cost > 0
                item.result = Result(decision.allowed, decision, "local", charged)
            else:
                mode = _rule(item).failure_mode
                item.result = Result(mode == "open", None, mode, False)

    def _together_replies(self, together: Together, found: Any, started: float) -> _Replies | None:
        """A Together's replies from what ``hit_all`` returned (or raised), with its accounting.

        None when the store could not take these keys together (nothing was sent).
        """
        if found is None:
            if self.breaker is not None:
                self.breaker.abandon()
            return None
        self._timed(time.perf_counter() - started)
        if isinstance(found, Exception):
            self._verdict(found)
            return [found] * len(together.items)
        decisions: list[Decision] = list(found)
        self._verdict(decisions[0])
        for item, decision in zip(together.items, decisions, strict=True):
            self._remember(Call(item, item.cost), decision)
        return list(decisions)

    def _check_then_charge(self, items: list[Item], stored: list[Item]) -> _Flow:
        yield from self._run([(item, 0) for item in stored])
        # Several descriptors may share a counter: each needs room for all of them.
        demand: dict[tuple[str, str, tuple[Rate, ...]], int] = {}
        for item in stored:
            ident = counter_id(item)
            demand[ident] = demand.get(ident, 0) + item.cost
        short = {
            id(item)
            for item in stored
            if item.cost > 0 and is_short(item, demand[counter_id(item)])
        }
        charge = [item for item in stored if item.cost > 0]
        if not denied(items, lambda item: id(item) in short):
            yield from self._run([(item, item.cost) for item in charge])
            return
        # Denied: re-run the descriptors that are short on their own at full cost,
        # for their exact retry times (a denial consumes nothing). One that fits
        # alone but not with its twins on the same counter is over as checked:
        # re-running it would charge it.
        alone = {id(item) for item in charge if id(item) in short and is_short(item, item.cost)}
        for item in charge:
            if id(item) in short and id(item) not in alone:
                assert item.result is not None
                item.result.allowed = False
        yield from self._run([(item, item.cost) for item in charge if id(item) in alone])
        # If a re-run passes after all (another request freed room in between),
        # the request may pass: then charge the rest too.
        if not denied(items):
            yield from self._run([(item, item.cost) for item in charge if id(item) not in short])

    def _settle(self, item: Item, reply: _Reply, cost: int) -> Result:
        if isinstance(reply, Cached):
            return Result(False, reply.decision, None, False, cached=True)
        if isinstance(reply, Decision):
            return Result(reply.allowed, reply, None, reply.allowed and cost > 0)
        rule = item.rule
        assert rule is not None
        self._report(item, reply)
        if rule.failure_mode == "local":
            decision = self._local.hit(rule.algorithm, item.key, rule.rates, cost)
            return Result(decision.allowed, decision, "local", decision.allowed and cost > 0)
        allowed = rule.failure_mode == "open"
        return Result(allowed, None, rule.failure_mode, False)

    def _report(self, item: Item, error: Exception) -> None:
        """Log (rate-bounded) and count a store failure for ``item``'s rule."""
        rule = item.rule
        assert rule is not None
        if isinstance(error, StorageError):
            # An outage fails every call: one line per error kind per minute, with a count.
            self._store_log.log(
                log,
                logging.WARNING,
                type(error).__name__,
                "store failed (%s); failure_mode %s answers for %s",
                error,
                rule.failure_mode,
                rule.path,
            )
        else:
            log.warning("store call for %s raised unexpectedly", rule.path, exc_info=error)
        try:
            self.hooks.on_store_error(rule.domain, rule, error)
        except Exception:
            log.exception("hook on_store_error failed; the answer is unaffected")

    def _cached(self, call: Call) -> Cached | None:
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
        return Cached(
            replace(
                decision,
                retry_after=max(0.0, decision.retry_after - elapsed),
                reset_after=max(0.0, decision.reset_after - elapsed),
                refill_after=max(0.0, decision.refill_after - elapsed),
            )
        )

    def _remember(self, call: Call, reply: Decision | Exception) -> None:
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
        self._store_hit_all = getattr(store, "hit_all", None)

    def should_rate_limit(self, request: Any) -> Any:
        """Decide a ``RateLimitRequest`` into a ``RateLimitResponse``; store failures never raise.

        Raises ``ConfigurationError`` for a malformed request (no domain, no descriptors).
        """
        flow = self._flow(request)
        try:
            step = next(flow)
            while True:
                if isinstance(step, Together):
                    step = flow.send(self._hit_together(step))
                else:
                    step = flow.send([self._hit(call) for call in step])
        except StopIteration as done:
            return done.value

    def _hit_together(self, together: Together) -> _Replies | None:
        refused = self._refused()
        if refused is not None:
            return [refused] * len(together.items)
        hit_all = self._store_hit_all
        assert hit_all is not None
        started = time.perf_counter()
        found: Any
        try:
            found = hit_all(together.algorithm, together.calls())
        except Exception as exc:  # every store failure is a policy decision, never a crash
            found = exc
        return self._together_replies(together, found, started)

    def _hit(self, call: Call) -> _Reply:
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
        self._store_hit_all = getattr(store, "hit_all", None)

    async def should_rate_limit(self, request: Any) -> Any:
        """See ``RateLimitService.should_rate_limit``."""
        flow = self._flow(request)
        try:
            step = next(flow)
            while True:
                replies: _Replies | None
                if isinstance(step, Together):
                    replies = await self._hit_together(step)
                elif len(step) == 1:  # no Task for a lone call: most requests have one
                    replies = [await self._hit(step[0])]
                else:
                    replies = list(await asyncio.gather(*(self._hit(call) for call in step)))
                step = flow.send(replies)
        except StopIteration as done:
            return done.value

    async def _hit_together(self, together: Together) -> _Replies | None:
        """See ``RateLimitService._hit_together``."""
        refused = self._refused()
        if refused is not None:
            return [refused] * len(together.items)
        hit_all = self._store_hit_all
        assert hit_all is not None
        started = time.perf_counter()
        found: Any
        try:
            found = await hit_all(together.algorithm, together.calls())
        except asyncio.CancelledError:
            if self.breaker is not None:
                self.breaker.abandon()
            raise
        except Exception as exc:  # every store failure is a policy decision, never a crash
            found = exc
        return self._together_replies(together, found, started)

    async def _hit(self, call: Call) -> _Reply:
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
