"""The decision core: every decision in ratewarden is made here, once, as a flow.

``DecisionCore`` holds a limiter's settings and its in-process parts, and writes
each operation as a flow (see ``_flows``): ``hit_flow``, ``hit_all_flow``,
``reset_flow``, ``apply_flow`` and the slot flows. ``Limiter`` and
``AsyncLimiter`` drive them; everything else in ratewarden (two tiers, hot keys,
regions, budgets, the Envoy service, the middleware, simulate and plan)
configures a limiter or composes these flows with ``yield from``, and none of it
calls a store itself.

A request meets, in order (each part off unless configured):

1. validation: key, rates, cost; bad input raises ``ConfigurationError`` before
   anything is consumed;
2. the negative cache: a key the store denied until T is denied here until T,
   unless a lease balance covers the cost;
3. the local bucket: a per-process share of the rates denies what this process
   alone would already refuse;
4. a lease: units bought from the store in advance pay with no store call;
5. the store, through the circuit breaker (buying a lease of ``k`` units when
   leases are on); a denial is remembered until its retry time;
6. the failure policy, when the store fails or the breaker is open: ``open``
   (allow, count nothing), ``closed`` (deny) or ``local`` (decide in this
   process); ``Decision.degraded`` names it. Without a policy the store's
   ``StorageUnavailableError`` is raised;
7. shadow (a denial reported as allowed and shadowed), then the decision hook
   and the metrics.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from ratewarden import algorithms
from ratewarden.checks import check_cost, check_key, check_rates
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import CircuitOpenError, ConfigurationError, StorageError
from ratewarden.limiter._aged import aged, assumed, marked
from ratewarden.limiter._breaker import CircuitBreaker
from ratewarden.limiter._counts import TierCounts
from ratewarden.limiter._flows import Ask, Flow, Wait
from ratewarden.limiter._leases import Balance, LeaseBook
from ratewarden.limiter._local import LocalRates, local_rates
from ratewarden.limiter._negative import NegativeCache
from ratewarden.limiter._report import failure_reason
from ratewarden.limiter._slots import Lease, lease_ttl_us
from ratewarden.metrics import NO_METRICS, LogRateLimiter, Metrics
from ratewarden.rate import Rate
from ratewarden.storage.memory import MemoryStore

__all__ = ["FAILURE_POLICIES", "LOCAL_ALGORITHM", "DecisionCore", "DecisionHook", "FailureHook"]

log = logging.getLogger("ratewarden.limiter")

#: What a limiter does when its store is unavailable: allow, deny, or decide in this process.
FAILURE_POLICIES = ("open", "closed", "local")
#: The in-process bucket's algorithm, whatever the global one is.
LOCAL_ALGORITHM = "gcra"
#: Keys the in-process store remembers (it only sees this process's traffic).
DEFAULT_LOCAL_KEYS = 100_000
#: Rates tuples a limiter remembers as checked before it starts again from empty.
_CHECKED_SIZE = 1024

#: Called after every decision with ``(algorithm, key, decision)``; see ``ratewarden.metrics``.
DecisionHook = Callable[[str, str, Decision], None]
#: Called with the exception when a store call fails and a failure policy answers instead.
FailureHook = Callable[[Exception], None]


def check_failure(policy: object, *, none_ok: bool = False) -> str | None:
    """A failure policy name (``open``, ``closed``, ``local``), or None where allowed."""
    if policy is None and none_ok:
        return None
    if policy not in FAILURE_POLICIES:
        raise ConfigurationError(
            f"failure policy {policy!r} must be one of {', '.join(FAILURE_POLICIES)}"
        )
    return str(policy)


class _Pending(NamedTuple):
    """``_start``'s hand-over to ``_rest``: the checked call, its local decision, the time."""

    algorithm: str
    key: str
    rates: tuple[Rate, ...]
    given: Rate | Sequence[Rate]
    cost: int
    policy: str | None
    local: Decision | None
    now: int
    leased: bool
    on_failure: FailureHook | None
    via: Callable[..., Any] | None = None


_Ident = tuple[str, str, tuple[Rate, ...]]
#: ``tuple.__new__``: a ``_Pending`` or ``Ask`` made on every hit without the NamedTuple's
#: Python-level ``__new__`` (as ``_aged`` builds Decisions with ``make_decision``).
_tuple = tuple.__new__
#: ``Metrics.decision``, a no-op: a metrics object that keeps it is not called per decision.
_NO_DECISION = Metrics.decision


class DecisionCore:
    """Settings, the in-process parts, and every flow; everything but the store calls.

    See ``Limiter`` for the options. ``store`` is whatever the driver calls; the
    core never calls it, it only names the method and the arguments.
    """

    def __init__(
        self,
        store: Any,
        algorithm: str,
        *,
        clock: Clock,
        on_decision: DecisionHook | None,
        local: LocalRates,
        negative_cache: int | NegativeCache | None,
        lease: int | None,
        lease_ttl: float | None,
        failure: str | None,
        breaker: CircuitBreaker | None,
        metrics: Metrics | None,
        name: str,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"limiter name {name!r} must be a non-empty string")
        if on_decision is not None and not callable(on_decision):
            raise ConfigurationError(f"on_decision {on_decision!r} must be callable")
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigurationError(f"breaker {breaker!r} must be a CircuitBreaker")
        self.store = store
        self.algorithm: str = algorithms.get(algorithm).NAME
        self.clock = clock
        self.name = name
        self.failure = check_failure(failure, none_ok=True)
        self.metrics: Metrics = metrics if metrics is not None else NO_METRICS
        self.breaker = breaker
        self._on_decision = on_decision
        self._local_for: Callable[[tuple[Rate, ...]], tuple[Rate, ...]] | None = local_rates(local)
        #: The in-process store of the local bucket and of the ``local`` failure policy.
        self.local = MemoryStore(clock=clock, max_keys=DEFAULT_LOCAL_KEYS)
        self.leases = None if lease is None else LeaseBook(lease)
        self._lease_ttl_us = _lease_ttl(lease_ttl)
        if isinstance(negative_cache, NegativeCache) or negative_cache is None:
            self.negative = negative_cache
        else:
            self.negative = NegativeCache(negative_cache)
        self.counts = TierCounts()
        #: The exceptions a failure policy answers; any other is raised. An adapter that
        #: must never raise (the Envoy service: no store error escapes) widens it to Exception.
        self.failure_errors: type[Exception] | tuple[type[Exception], ...] = StorageError
        self._log = LogRateLimiter(60.0, clock=clock)
        # id(rates tuple) -> (the tuple, its checked rates); kept so that its id stays its own.
        self._checked: dict[int, tuple[object, tuple[Rate, ...]]] = {}
        #: True when every part is off: a hit is one store call, its Decision returned as is.
        self.plain = (
            on_decision is None
            and self._local_for is None
            and self.leases is None
            and self.negative is None
            and self.failure is None
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
        failure: str | None = None,
        algorithm: str | None = None,
        on_failure: FailureHook | None = None,
        via: Callable[..., Any] | None = None,
    ) -> Flow[Decision]:
        """``hit`` as a flow: consume ``cost`` from every rate on ``key`` if all allow.

        ``failure`` overrides the limiter's failure policy for this call (a rule's
        own), ``algorithm`` its algorithm; ``on_failure`` is told the exception
        when a store call fails and the policy answers, and reports it: the
        limiter logs nothing of its own for that call. ``via`` decides in place
        of the store's ``hit``: a callable taking the same arguments
        ``(algorithm, key, rates, cost)`` and returning a Decision (a coroutine
        function under ``AsyncLimiter``), asked through the same breaker, policy,
        timing and negative cache (a token budget's check or charge, say).
        """
        name = self.algorithm if algorithm is None else _algorithm_name(algorithm)
        if self.plain and not shadow and failure is None and via is None:
            # Every part off: one store call and its Decision as is, as ``Limiter.hit`` gives
            # it (the store checks the input). Adapters composing this flow pay no more.
            self.counts.add("store_calls")
            reply = yield _tuple(Ask, ("hit", (name, key, rates, cost)))
            if isinstance(reply, Exception):
                raise reply
            plain: Decision = reply
            return plain
        started = self._start(name, key, rates, cost, failure, on_failure, via)
        if type(started) is not _Pending:
            return self._finish(name, key, started, shadow)  # type: ignore[arg-type]
        if started.leased:
            decision = yield from self._leased(started)
        else:
            decision = yield from self._global(started, started.cost)
        return self._finish(name, key, decision, shadow)

    def peek_flow(
        self, key: str, rates: Rate | Sequence[Rate], *, failure: str | None = None
    ) -> Flow[Decision]:
        """The state of ``key``, consuming nothing (a hit of cost 0, not reported to hooks)."""
        started = self._start(self.algorithm, key, rates, 0, failure, None)
        assert type(started) is _Pending  # a check is never answered in this process
        return (yield from self._global(started, 0))

    def acquire_flow(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1, *, timeout: float | None = None
    ) -> Flow[Decision]:
        """Wait (on the store's clock) until allowed, then return the allowing Decision.

        Gives up and returns the denied Decision when the wait would pass
        ``timeout`` seconds or can never succeed. For the leaky-bucket shaper it
        also sleeps the allowed request's ``delay``.
        """
        limit = _check_timeout(timeout)
        check_cost(cost)
        waited = 0.0
        while True:
            decision = yield from self.hit_flow(key, rates, cost)
            if decision.allowed:
                yield Wait(decision.delay)
                return decision
            wait = decision.retry_after
            if math.isinf(wait) or (limit is not None and waited + wait > limit):
                return decision
            yield Wait(wait)
            waited += wait

    def acquire_slot_flow(
        self, key: str, limit: int, slots: int = 1, ttl: float = 60.0, lease_id: str | None = None
    ) -> Flow[Lease]:
        """Take ``slots`` of ``limit`` concurrent slots on ``key`` for at most ``ttl`` seconds.

        Returns a Lease whether or not it was granted (check ``lease.allowed``).
        A holder that crashes loses its slots after ``ttl``; long work renews.
        Acquiring again with the same ``lease_id`` renews it.
        """
        lease_id = lease_id or uuid.uuid4().hex
        ttl_us = lease_ttl_us(ttl)
        decision = yield from self.slot_flow("acquire_slot", key, limit, lease_id, slots, ttl_us)
        return Lease(key, lease_id, limit, slots, ttl, decision)

    def release_slot_flow(self, lease: Lease) -> Flow[bool]:
        """Give the lease's slots back; False if it had lapsed or was never granted."""
        if not lease.allowed:
            return False
        return bool((yield from self.slot_flow("release_slot", lease.key, lease.lease_id)))

    def renew_slot_flow(self, lease: Lease, ttl: float | None = None) -> Flow[bool]:
        """Extend a held lease by ``ttl`` (default: its own ttl) from now."""
        ttl_us = lease_ttl_us(lease.ttl if ttl is None else ttl)
        if not lease.allowed:
            return False
        return bool((yield from self.slot_flow("renew_slot", lease.key, lease.lease_id, ttl_us)))

    def hit_all_flow(
        self,
        calls: Sequence[tuple[str, Rate | Sequence[Rate], int]],
        *,
        algorithm: str | None = None,
    ) -> Flow[list[Decision] | None]:
        """Several ``(key, rates, cost)`` decisions in one atomic store step, all or nothing.

        None when the store cannot take these keys together (a Cluster's keys on
        several slots): nothing was sent. A store failure raises
        ``StorageUnavailableError`` (the breaker is told); no failure policy
        answers for a batch, since its parts may have different policies.
        """
        name = self.algorithm if algorithm is None else _algorithm_name(algorithm)
        refused = self._refused()
        if refused is not None:
            raise refused
        timed = self.metrics is not NO_METRICS
        started = time.perf_counter() if timed else 0.0
        try:
            reply = yield Ask("hit_all", (name, calls))
        except BaseException:
            if self.breaker is not None:
                self.breaker.abandon()
            raise
        if reply is None:
            if self.breaker is not None:
                self.breaker.abandon()
            return None
        if timed:  # a declined batch (None) sent nothing: no round trip to time
            self.metrics.store_latency(seconds=time.perf_counter() - started)
        self._verdict(reply)
        if isinstance(reply, Exception):
            raise reply
        decisions: list[Decision] = list(reply)
        negative = self.negative
        if negative is not None:
            now = self.clock.now_us()
            for (key, rates, cost), decision in zip(calls, decisions, strict=True):
                if cost > 0 and not decision.allowed:
                    negative.remember((name, key, check_rates(rates)), decision, now)
        return decisions

    def cached_denial(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1, *, algorithm: str | None = None
    ) -> Decision | None:
        """The store's remembered denial that answers a hit of ``cost`` on ``key`` now (aged
        to now), or None: the store must be asked. No store call; None without a negative cache.

        ``hit_flow`` consults it by itself; this is for an adapter that must know first,
        e.g. to answer a check (cost 0) made ahead of a charge of ``cost``.
        """
        negative = self.negative
        if negative is None:
            return None
        name = self.algorithm if algorithm is None else algorithms.get(algorithm).NAME
        if type(rates) is Rate:
            found: tuple[Rate, ...] = (rates,)
        else:
            known = self._checked.get(id(rates))
            found = known[1] if known is not None and known[0] is rates else self._check(rates)
        ident = (name, key, found)
        if ident not in negative:  # the common case: nothing remembered
            return None
        return self._cached_denial(ident, cost, self.clock.now_us())

    def local_all(
        self,
        calls: Sequence[tuple[str, Rate | Sequence[Rate], int]],
        *,
        algorithm: str | None = None,
    ) -> list[Decision]:
        """The ``local`` policy's answer for a batch the store failed: ``calls`` decided
        together on the in-process store (all or nothing), each marked ``degraded="local"``.

        ``hit_all_flow`` raises on a failure, since a batch's parts may have different
        policies; its caller answers each part, the ``local`` ones with this.
        """
        name = self.algorithm if algorithm is None else algorithms.get(algorithm).NAME
        decisions = self.local.hit_all(name, calls)
        assert decisions is not None  # the in-process store takes any keys together
        return [marked(decision, "local") for decision in decisions]

    def reset_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[None]:
        """Forget ``key``'s usage: the store's, and this process's (bucket, lease, denial)."""
        self._forget(key, rates)
        reply = yield Ask("reset", (self.algorithm, key, rates))
        if isinstance(reply, Exception):
            raise reply

    def apply_flow(self, op: Any) -> Flow[list[int]]:
        """Run one store operation (``ratewarden.storage.Op``: token budgets, fair shares).

        Through the breaker; a failure raises ``StorageUnavailableError``.
        """
        refused = self._refused()
        if refused is not None:
            raise refused
        reply = yield Ask("apply", (op,))
        self._verdict(reply)
        if isinstance(reply, Exception):
            raise reply
        return list(reply)

    def slot_flow(self, method: str, *args: Any) -> Flow[Any]:
        """A concurrency-slot call (``acquire_slot``, ``release_slot``, ``renew_slot``)."""
        refused = self._refused()
        if refused is not None:
            raise refused
        reply = yield Ask(method, args)
        self._verdict(reply)
        if isinstance(reply, Exception):
            raise reply
        return reply

    # -- the parts of a hit ----------------------------------------------------------------

    def _start(
        self,
        name: str,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int,
        failure: str | None,
        on_failure: FailureHook | None,
        via: Callable[..., Any] | None = None,
    ) -> Decision | _Pending:
        """The part of a hit that never asks the store, as a plain call.

        A Decision when this process answers (a cached denial, the local bucket's
        denial, a lease); otherwise what ``_rest`` needs to go on.
        """
        if type(rates) is Rate:
            found: tuple[Rate, ...] = (rates,)
        else:
            known = self._checked.get(id(rates))
            found = known[1] if known is not None and known[0] is rates else self._check(rates)
        if type(cost) is not int or cost < 0:
            check_cost(cost)
        if type(key) is not str or not key:
            check_key(key)
        policy = failure
        if failure is None:
            policy = self.failure
        elif failure not in FAILURE_POLICIES:  # the usual names are taken without a call
            check_failure(failure)
        now = self.clock.now_us()
        if cost == 0:
            return _tuple(
                _Pending, (name, key, found, rates, 0, policy, None, now, False, on_failure, via)
            )
        ident = (name, key, found)
        cached = self._cached_denial(ident, cost, now)
        if cached is not None:
            return cached
        local = None
        if self._local_for is not None:
            local = self.local.hit(LOCAL_ALGORITHM, key, self._local_for(found), cost)
            if not local.allowed:
                self.counts.add("local_denials")
                return local
        leases = self.leases
        if leases is not None:
            held = leases.spend(ident, cost, now)
            if held is not None:
                self.counts.add("lease_hits")
                return _from_lease(held, cost, now)
            return _tuple(
                _Pending, (name, key, found, rates, cost, policy, local, now, True, on_failure, via)
            )
        return _tuple(
            _Pending, (name, key, found, rates, cost, policy, local, now, False, on_failure, via)
        )

    def _check(self, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
        """Validate ``rates``; a tuple (immutable) is remembered by identity, as stores do."""
        found = check_rates(rates)
        if type(rates) is tuple:
            if len(self._checked) >= _CHECKED_SIZE:
                self._checked.clear()
            self._checked[id(rates)] = (rates, found)
        return found

    def _cached_denial(self, ident: _Ident, cost: int, now: int) -> Decision | None:
        """The store's recent denial of ``ident``, still holding for this cost, aged to ``now``.

        Skipped when a lease balance covers the cost: units already bought may be spent.
        """
        negative, leases = self.negative, self.leases
        if negative is None or ident not in negative:  # the common case: nothing cached
            return None
        short = cost
        if leases is not None:
            short = leases.shortfall(ident, cost, now)
            if short == 0:
                return None
        denial = negative.lookup(ident, short, now)
        if denial is None:
            return None
        self.counts.add("negative_hits")
        return aged(denial.decision, now - denial.at_us, cost)

    def _global(self, p: _Pending, units: int) -> Flow[Decision]:
        """Ask the store for ``units`` on the call's key; the policy answers a failure."""
        reply = yield from self._ask(p, units)
        if isinstance(reply, Exception):
            return self._degrade(p, reply)
        if units > 0 and not reply.allowed and self.negative is not None:
            self.negative.remember((p.algorithm, p.key, p.rates), reply, p.now)
        return reply

    def _leased(self, p: _Pending) -> Flow[Decision]:
        """No balance covered the cost (``_start`` tried): buy a lease, or ask for this request."""
        book = self.leases
        assert book is not None
        ident = (p.algorithm, p.key, p.rates)
        if not book.start_buying(ident):
            # Another request is buying this key's lease: ask for this request alone.
            return (yield from self._global(p, p.cost))
        try:
            return (yield from self._buy(p, book, ident))
        finally:
            book.stop_buying(ident)

    def _buy(self, p: _Pending, book: LeaseBook, ident: _Ident) -> Flow[Decision]:
        cost, now = p.cost, p.now
        held = book.spend(ident, cost, now)  # a buyer may have topped it up just before
        if held is not None:
            self.counts.add("lease_hits")
            return _from_lease(held, cost, now)
        short = book.shortfall(ident, cost, now)
        buy = max(book.units, short)
        reply = yield from self._ask(p, buy)
        if isinstance(reply, Decision) and not reply.allowed and buy > short:
            # Near the limit a whole lease may not fit: buy what is left (on every layer), at
            # least the shortfall.
            left = min((layer.remaining for layer in reply.layers), default=reply.remaining)
            buy = max(short, min(buy, left))
            reply = yield from self._ask(p, buy)
        if isinstance(reply, Exception):
            return self._degrade(p, reply)
        if not reply.allowed:
            # Remembered for shortfalls of at least what was refused (``reply.cost``, the
            # shortfall itself unless another process took units between the two asks).
            if self.negative is not None:
                self.negative.remember(ident, reply, now)
            return replace(reply, cost=cost)
        self.counts.add("leases_bought")
        ttl = self._lease_ttl_us or max(rate.period_us for rate in p.rates)
        return _from_lease(book.credit(ident, reply, cost, now, ttl), cost, now)

    def _ask(self, p: _Pending, units: int) -> Flow[Decision | Exception]:
        """One store hit through the breaker: its Decision, or the exception standing for it.

        A failure the policy cannot answer (no policy, or an error that is not a
        storage failure) is raised.
        """
        refused = self._refused()
        if refused is not None:
            if p.policy is None:
                raise refused
            return refused
        self.counts.add("store_calls")
        timed = self.metrics is not NO_METRICS
        started = time.perf_counter() if timed else 0.0
        try:
            # The rates as given: a store finds its cached shape by the argument's identity.
            method = "hit" if p.via is None else p.via
            reply = yield _tuple(Ask, (method, (p.algorithm, p.key, p.given, units)))
        except BaseException:
            if self.breaker is not None:
                self.breaker.abandon()
            raise
        if timed:
            self.metrics.store_latency(seconds=time.perf_counter() - started)
        self._verdict(reply)
        if isinstance(reply, Exception) and (
            p.policy is None or not isinstance(reply, self.failure_errors)
        ):
            raise reply
        found: Decision | Exception = reply
        return found

    def _refused(self) -> CircuitOpenError | None:
        """The error standing for a store call the open breaker does not let through."""
        breaker = self.breaker
        if breaker is None or breaker.allow():
            return None
        return CircuitOpenError(
            f"circuit breaker open after store failures; next probe in {breaker.retry_in():.3f}s"
        )

    def _verdict(self, reply: object) -> None:
        """Tell the breaker how a call it let through went."""
        breaker = self.breaker
        if breaker is None:
            return
        if not isinstance(reply, Exception):
            breaker.success()
        elif isinstance(reply, StorageError):
            breaker.failure()
        else:
            breaker.abandon()  # a bug, not an outage: no verdict on the store

    def _degrade(self, p: _Pending, error: Exception) -> Decision:
        policy = p.policy
        assert policy is not None
        reason = failure_reason(error)
        self.counts.add("degraded")
        self.metrics.degraded(rule=self.name, mode=policy, reason=reason)
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
                "ratewarden %s: store unavailable (%s); failure policy %r answers",
                self.name,
                reason,
                policy,
            )
        if policy == "local":
            local = p.local
            if local is None:
                local = self.local.hit(p.algorithm, p.key, p.rates, p.cost)
            return marked(local, policy)
        wait = self.breaker.retry_in() if self.breaker is not None else 0.0
        if not wait and self.breaker is not None:
            wait = self.breaker.cooldown
        return assumed(p.rates, p.cost, policy, wait)

    def _finish(self, algorithm: str, key: str, decision: Decision, shadow: bool) -> Decision:
        if shadow and not decision.allowed:
            decision = replace(decision, allowed=True, shadowed=True)
        if self._on_decision is not None:
            self._on_decision(algorithm, key, decision)
        metrics = self.metrics
        if metrics is not NO_METRICS and type(metrics).decision is not _NO_DECISION:
            metrics.decision(rule=self.name, algorithm=algorithm, decision=decision)
        return decision

    def _options(self) -> str:
        """The options that are on, for ``repr``."""
        parts = []
        if self.failure is not None:
            parts.append(f"failure={self.failure!r}")
        if self.leases is not None:
            parts.append(f"lease={self.leases.units}")
        if self._local_for is not None:
            parts.append("local=...")
        if self.negative is not None:
            parts.append(f"negative_cache={self.negative.max_keys}")
        return "".join(", " + part for part in parts)

    def _forget(self, key: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
        """Drop what this process holds for ``key``: cached denial, lease, local bucket."""
        found = check_rates(rates)
        check_key(key)
        ident = (self.algorithm, key, found)
        if self.negative is not None:
            self.negative.forget(ident)
        if self.leases is not None:
            self.leases.forget(ident)
        self.local.reset(LOCAL_ALGORITHM, key, found)
        if self._local_for is not None:
            self.local.reset(LOCAL_ALGORITHM, key, self._local_for(found))
        return found


def _algorithm_name(algorithm: str) -> str:
    """The algorithm ``algorithm`` names (a name is its own, the usual case: no lookup),
    or a ConfigurationError listing the choices."""
    if type(algorithm) is str and algorithm in algorithms.ALGORITHMS:
        return algorithm
    name: str = algorithms.get(algorithm).NAME
    return name


def _from_lease(held: Balance, cost: int, now: int) -> Decision:
    """An allowed Decision paid from a lease: the grant, aged, with the units still held."""
    return aged(held.grant, now - held.granted_us, cost, held.units)


def _lease_ttl(ttl: float | None) -> int:
    """Whole microseconds, or 0 for "the longest period of the rates"."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"lease_ttl {ttl!r} must be a positive number of seconds")
    return max(1, math.ceil(ttl * 1_000_000))


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(f"timeout {timeout!r} must be seconds >= 0, or None to wait")
    return float(timeout)
