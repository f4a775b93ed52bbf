"""The decision core: every decision in ratewarden is made here, once, as a flow.

``DecisionCore`` holds a limiter's settings and its in-process parts, and writes
each operation as a flow (see ``_flows``): ``hit_flow``, ``hit_all_flow``,
``reset_flow``, ``apply_flow`` and the slot flows. ``Limiter`` and
``AsyncLimiter`` drive them; everything else in ratewarden (two tiers, hot keys,
regions, budgets, the Envoy service, the middleware, simulate and plan)
configures a limiter or composes these flows with ``yield from``, and none of it
calls a store itself.

A request meets, in order (each part off unless configured):

1. validation: key, rates (for the algorithm, as the store's plan checks them), cost;
   bad input raises ``ConfigurationError`` before anything is consumed;
2. the negative cache: a key the store denied until T is denied here until T,
   unless a lease balance covers the cost;
3. the local bucket: a per-process share of the rates denies what this process
   alone would already refuse (a cost it can never hold goes on to the store);
4. a lease: units bought from the store in advance pay with no store call;
5. the store, through the circuit breaker (buying a lease of ``k`` units when
   leases are on); a denial is remembered until its retry time;
6. the failure mode, when the store fails or the breaker is open: ``open``
   (allow, count nothing), ``closed`` (deny) or ``local`` (decide in this
   process); ``Decision.degraded`` names it. Without one the store's
   ``StorageUnavailableError`` is raised;
7. shadow (a denial reported as allowed and shadowed), then the decision hook
   and the metrics.

Steps 1 to 4 are ``LocalTier._start`` (``_local_tier``), the negative cache and
leases ``Leasing`` (``_leasing``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from ratewarden import algorithms
from ratewarden.algorithms import layers
from ratewarden.checks import check_bool, check_local, check_rates, keywords_checked
from ratewarden.clock import Clock, check_clock
from ratewarden.decision import Decision
from ratewarden.deprecation import UNSET, renamed
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter._aged import NO_BREAKER_WAIT, assumed, marked
from ratewarden.limiter._breaker import CircuitBreaker
from ratewarden.limiter._counts import TierCounts
from ratewarden.limiter._each import EachCall, ViaAll, hit_each_flow
from ratewarden.limiter._flows import Ask, Flow
from ratewarden.limiter._leases import LeaseBook
from ratewarden.limiter._leasing import Leasing
from ratewarden.limiter._local import LocalRates, local_rates
from ratewarden.limiter._local_tier import LocalTier
from ratewarden.limiter._metrics_check import DECISION_HOOKS, check_metrics
from ratewarden.limiter._negative import NegativeCache
from ratewarden.limiter._operations import Operations
from ratewarden.limiter._report import failure_reason
from ratewarden.limiter._settings import (
    FAILURE_MODES,
    LOCAL_ALGORITHM,
    DecisionHook,
    FailureHook,
    Pending,
    algorithm_name,
    balance_ttl_us,
    check_failure_mode,
    check_store,
    refuse_limiter,
)
from ratewarden.metrics import NO_METRICS, LogRateLimiter, Metrics
from ratewarden.rate import Rate
from ratewarden.storage.memory import MemoryStore

__all__ = [
    "FAILURE_MODES",
    "LOCAL_ALGORITHM",
    "DecisionCore",
    "DecisionHook",
    "FailureHook",
    "check_failure_mode",
    "hook_refused",
]

log = logging.getLogger("ratewarden.limiter")

#: Keys the in-process store remembers (it only sees this process's traffic).
DEFAULT_LOCAL_KEYS = 100_000
#: Rates a limiter remembers as checked before it starts again from empty.
_CHECKED_SIZE = 1024

#: ``tuple.__new__``: an ``Ask`` made on every hit without the NamedTuple's Python-level
#: ``__new__`` (as ``_aged`` builds Decisions with ``make_decision``).
_tuple = tuple.__new__
#: ``Metrics.decision``, a no-op: a metrics object that keeps it is not called per decision.
_NO_DECISION = Metrics.decision


class DecisionCore(LocalTier, Leasing, Operations):
    """Settings, the in-process parts, and every flow; everything but the store calls.

    See ``Limiter`` for the options. ``store`` is whatever the driver calls; the
    core never calls it, it only names the method and the arguments. Without a
    store, the in-process one of the subclass (``memory_store``) is made, on
    ``clock`` when one is given.
    """

    #: The store made when none is given: ``MemoryStore`` or ``AsyncMemoryStore``.
    memory_store: ClassVar[Callable[..., Any]]
    #: Whether the store's calls are awaited: the store given must be of that twin.
    awaited: ClassVar[bool]

    @keywords_checked
    def __init__(
        self,
        store: Any = None,
        algorithm: str = "gcra",
        *,
        on_decision: DecisionHook | None = None,
        local: LocalRates = None,
        negative_cache: int | NegativeCache | None = None,
        lease: int | None = None,
        lease_ttl: float | None = None,
        failure_mode: str | None = None,
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "default",
        clock: Clock | None = None,
        failure: str | None = UNSET,
    ) -> None:
        # ``failure`` is the deprecated name of ``failure_mode`` (one release). The warning
        # names the building line, past this frame and the keyword check's (stacklevel 4).
        what = type(self).__name__
        failure_mode = renamed(
            what, "failure", "failure_mode", failure, failure_mode, None, stacklevel=4
        )
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"limiter name {name!r} must be a non-empty string")
        if on_decision is not None and not callable(on_decision):
            raise ConfigurationError(f"on_decision {on_decision!r} must be callable")
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigurationError(f"breaker {breaker!r} must be a CircuitBreaker")
        checked_metrics = check_metrics(what, metrics, DECISION_HOOKS)
        clock = check_clock(type(self).__name__, clock)
        if isinstance(store, DecisionCore) or (
            isinstance(store, type) and issubclass(store, DecisionCore)
        ):
            refuse_limiter(type(self).__name__, store)
        if store is not None:
            check_store(type(self).__name__, store, awaited=type(self).awaited)
        found = store if store is not None else type(self).memory_store(clock=clock)
        #: The store the driver calls (a ``Store``, or an ``AsyncStore`` for ``AsyncLimiter``).
        self.store: Any = found
        self.algorithm = algorithm_name(algorithm)
        self.clock: Clock = clock if clock is not None else found.clock
        self.name = name
        self.failure_mode = check_failure_mode(failure_mode, none_ok=True)
        self.metrics = checked_metrics
        self.breaker = breaker
        self._on_decision = on_decision
        self._local_for = local_rates(check_local(what, local))
        #: The in-process store of the local bucket and of the ``local`` failure mode.
        self.local = MemoryStore(clock=self.clock, max_keys=DEFAULT_LOCAL_KEYS)
        if lease is None and lease_ttl is not None:
            raise ConfigurationError(
                f"{what}: lease_ttl={lease_ttl!r} is given without lease=, so nothing is leased "
                "and it would do nothing; give lease=k (the units bought per store call) with "
                "it, or drop lease_ttl"
            )
        self.leases = None if lease is None else LeaseBook(lease)
        self._lease_ttl_us = balance_ttl_us(lease_ttl)
        if isinstance(negative_cache, NegativeCache) or negative_cache is None:
            self.negative = negative_cache
        else:
            self.negative = NegativeCache(negative_cache)
        self.counts = TierCounts()
        #: The exceptions a failure mode answers; any other is raised. An adapter that
        #: must never raise (the Envoy service: no store error escapes) widens it to Exception.
        self.failure_errors: type[Exception] | tuple[type[Exception], ...] = StorageError
        self._log = LogRateLimiter(60.0, clock=self.clock)
        # id(Rate or rates tuple) -> (it, the algorithm it was checked for, its checked
        # rates); kept so that its id stays its own.
        self._checked: dict[int, tuple[object, str, tuple[Rate, ...]]] = {}
        #: (algorithm, rates) that passed the algorithm's own checks (``_check``).
        self._fits: set[tuple[str, tuple[Rate, ...]]] = set()
        #: Rates whose lease size was checked (``LocalTier._check_lease_size``).
        self._sized: set[tuple[Rate, ...]] = set()
        #: True when every part is off: a hit is one store call, its Decision returned as is.
        self.plain = (
            on_decision is None
            and self._local_for is None
            and self.leases is None
            and self.negative is None
            and self.failure_mode is None
            and breaker is None
            and self.metrics is NO_METRICS
        )

    # -- the flows -------------------------------------------------------------------------

    def hit_flow(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        shadow: bool = False,
        failure_mode: str | None = None,
        algorithm: str | None = None,
        on_failure: FailureHook | None = None,
        via: Callable[..., Any] | None = None,
    ) -> Flow[Decision]:
        """``hit`` as a flow: consume ``cost`` from every rate on ``key`` if all allow.

        ``failure_mode`` overrides the limiter's failure mode for this call (a
        rule's own), ``algorithm`` its algorithm; ``on_failure`` is told the
        exception when a store call fails and the failure mode answers, and
        reports it: the limiter logs nothing of its own for that call. ``via``
        decides in place of the store's ``hit``: a callable taking the same
        arguments ``(algorithm, key, rates, cost)`` and returning a Decision (a
        coroutine function under ``AsyncLimiter``), asked through the same
        breaker, failure mode, timing and negative cache (a token budget's check
        or charge, say).
        """
        if shadow is not False and shadow is not True:  # "false" would switch enforcing off
            check_bool(f"{type(self).__name__}.hit: shadow", shadow)
        name = self.algorithm if algorithm is None else algorithm_name(algorithm)
        if self.plain and not shadow and failure_mode is None and via is None:
            # Every part off: one store call and its Decision as is, as ``Limiter.hit`` gives
            # it (the store checks the input). Adapters composing this flow pay no more.
            self.counts.add("store_calls")
            reply = yield _tuple(Ask, ("hit", (name, key, rates, cost)))
            if isinstance(reply, Exception):
                raise reply
            plain: Decision = reply
            return plain
        if on_failure is not None and not callable(on_failure):
            # Before the store is asked, where a hook failing in an outage is only logged. A
            # plain limiter's own hit (its store call, not this flow) comes here when it fails.
            raise hook_refused(on_failure)
        started = self._start(name, key, rates, cost, failure_mode, on_failure, via)
        if type(started) is not Pending:
            return self._finish(name, key, started, shadow)  # type: ignore[arg-type]
        if started.leased:
            decision = yield from self._leased(started)
        else:
            decision = yield from self._global(started, started.cost)
        return self._finish(name, key, decision, shadow)

    def hit_each_flow(
        self, calls: Sequence[EachCall], via_all: ViaAll
    ) -> Flow[list[tuple[Decision, bool]]]:
        """Several ``hit_flow`` calls whose store calls are one ``via_all`` (see ``_each``);
        each call's Decision and whether ``via_all`` decided it."""
        return hit_each_flow(self, calls, via_all)

    # -- the parts of a hit ----------------------------------------------------------------

    def _peek(
        self, key: str, rates: Rate | Sequence[Rate], failure_mode: str | None
    ) -> Flow[Decision]:
        """``peek_flow``'s check: a hit of cost 0 that skips the decision's hooks."""
        started = self._start(self.algorithm, key, rates, 0, failure_mode, None)
        assert type(started) is Pending  # a check is never answered in this process
        return (yield from self._global(started, 0))

    def _check(self, algorithm: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
        """``rates`` checked for ``algorithm`` as the store's plan checks them (``check_rates``,
        then the algorithm's own ``layers``: a window's burst, two rates of one state), so
        that a call the store would refuse spends nothing here first. A Rate or a tuple
        (immutable) is remembered by identity, with the algorithm; a list by value."""
        known = self._checked.get(id(rates))
        if known is not None and known[0] is rates and known[1] == algorithm:
            return known[2]
        found = check_rates(rates)
        fit = (algorithm, found)
        if fit not in self._fits:
            layers(algorithms.get(algorithm), found)
            if len(self._fits) >= _CHECKED_SIZE:
                self._fits.clear()
            self._fits.add(fit)
        kind = type(rates)
        if kind is tuple or kind is Rate:
            if len(self._checked) >= _CHECKED_SIZE:
                self._checked.clear()
            self._checked[id(rates)] = (rates, algorithm, found)
        return found

    def _global(self, p: Pending, units: int) -> Flow[Decision]:
        """Ask the store for ``units`` on the call's key; the failure mode answers a failure."""
        reply = yield from self._ask(p, units)
        if isinstance(reply, Exception):
            return self._degrade(p, reply)
        if units > 0 and not reply.allowed and self.negative is not None:
            self.negative.remember((p.algorithm, p.key, p.rates), reply, p.now)
        return reply

    def _ask(self, p: Pending, units: int) -> Flow[Decision | Exception]:
        """One store hit through the breaker: its Decision, or the exception standing for it.

        A failure the failure mode cannot answer (none set, or an error that is
        not a storage failure) is raised.
        """
        node = self._node_of(p.key, rates=p.rates)
        refused = self._refused(node)
        if refused is not None:
            if p.failure_mode is None:
                raise refused
            return refused
        self.counts.add("store_calls")
        timed = self.metrics is not NO_METRICS
        started = time.perf_counter() if timed else 0.0
        # The rates as given: a store finds its cached shape by the argument's identity.
        method = "hit" if p.via is None else p.via
        reply = yield from self._sent(
            _tuple(Ask, (method, (p.algorithm, p.key, p.given, units))), node
        )
        if timed:
            self.metrics.store_latency(seconds=time.perf_counter() - started)
        self._verdict(reply, node)
        if isinstance(reply, Exception) and (
            p.failure_mode is None or not isinstance(reply, self.failure_errors)
        ):
            raise reply
        found: Decision | Exception = reply
        return found

    def _degrade(self, p: Pending, error: Exception) -> Decision:
        mode = p.failure_mode
        assert mode is not None
        reason = failure_reason(error)
        self.counts.add("degraded")
        self.metrics.degraded(rule=self.name, failure_mode=mode, reason=reason)
        if p.on_failure is not None:  # the caller reports the failure, in its own words
            try:
                p.on_failure(error)
            except Exception:
                log.exception("on_failure hook failed; the answer is unaffected")
        else:
            self._log.log(
                log,
                logging.WARNING,
                f"{self.name}/{reason}",
                "ratewarden %s: the store failed (%s: %s); failure mode %r answers",
                self.name,
                reason,
                error,
                mode,
            )
        local = p.local
        if mode == "local" and (local is None or local.allowed):
            if local is None:
                local = self.local.hit(p.algorithm, p.key, p.rates, p.cost)
            return marked(local, mode)
        # Open or closed; or ``local`` for a cost the local bucket can never hold (``_start``
        # sent it to the store): no process admits more than its bucket, so it is denied
        # until the store is asked again, as ``closed`` denies.
        breaker = self.breaker
        wait = NO_BREAKER_WAIT
        if breaker is not None:
            wait = breaker.retry_in(self._node_of(p.key, rates=p.rates)) or breaker.cooldown
        return assumed(p.rates, p.cost, mode, wait)

    def _finish(self, algorithm: str, key: str, decision: Decision, shadow: bool) -> Decision:
        if shadow and not decision.allowed:
            decision = replace(decision, allowed=True, shadowed=True)
        if self._on_decision is not None:
            self._on_decision(algorithm, key, decision)
        metrics = self.metrics
        if metrics is not NO_METRICS and type(metrics).decision is not _NO_DECISION:
            metrics.decision(rule=self.name, algorithm=algorithm, decision=decision)
        return decision

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.store!r}, algorithm={self.algorithm!r}{self._options()})"
        )


def hook_refused(hook: object) -> ConfigurationError:
    """The refusal of an ``on_failure`` that is not callable."""
    return ConfigurationError(
        f"on_failure {hook!r} must be callable (it is told the store's exception "
        "when the failure mode answers), or None"
    )
