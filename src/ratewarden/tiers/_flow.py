"""The two-tier decision, written once as a generator; ``TwoTier`` and ``AsyncTwoTier`` drive it.

``_TwoTierBase._flow`` yields the number of units to charge on the global store
and receives the store's reply (a ``Decision``, or the ``StorageError`` it
raised); the sync and async classes drive it with a short loop each. In order:

1. a cached denial (negative cache) answers at once, unless a lease covers the cost;
2. the local bucket denies what this process alone would already refuse;
3. a live lease pays for the request with no network;
4. otherwise the global store decides (buying a lease of ``k`` units when leases
   are on); a denial is remembered until its retry time;
5. when the store fails, or the circuit breaker is open, the failure policy
   answers and the decision says which one in ``Decision.degraded``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import NamedTuple

from ratewarden import algorithms
from ratewarden.clock import Clock
from ratewarden.decision import Decision, make_decision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.metrics import NO_METRICS, LogRateLimiter, Metrics
from ratewarden.rate import Rate
from ratewarden.storage._plan import check_cost, check_key, check_rates
from ratewarden.storage.memory import MemoryStore
from ratewarden.tiers._breaker import CircuitBreaker
from ratewarden.tiers._counts import TierCounts
from ratewarden.tiers._leases import Balance, LeaseBook
from ratewarden.tiers._local import LocalRates, local_rates
from ratewarden.tiers._negative import NegativeCache

__all__ = ["FAILURE_MODES", "LOCAL_ALGORITHM", "Flow"]

log = logging.getLogger("ratewarden.tiers")

#: What a limiter does when the store is unavailable: allow, deny, or decide in this process.
FAILURE_MODES = ("open", "closed", "local")
#: The in-process bucket's algorithm, whatever the global one is.
LOCAL_ALGORITHM = "gcra"
#: Keys the in-process bucket remembers (it only sees this process's traffic).
DEFAULT_LOCAL_KEYS = 100_000
#: Rates tuples a limiter remembers as checked before it starts again from empty.
_CHECKED_SIZE = 1024

#: A store reply as the flow receives it.
Reply = Decision | StorageError
#: Yields units to charge on the store, receives its reply, returns the Decision.
Flow = Generator[int, Reply, Decision]


class _Pending(NamedTuple):
    """``_start``'s hand-over to ``_rest``: the checked call, its local decision, the time."""

    key: str
    rates: tuple[Rate, ...]
    cost: int
    mode: str
    local: Decision | None
    now: int
    leased: bool


_Ask = Generator[int, Reply, Decision | str]
_Ident = tuple[str, tuple[Rate, ...]]


def _check_mode(mode: object) -> str:
    if mode not in FAILURE_MODES:
        raise ConfigurationError(
            f"failure policy {mode!r} must be one of {', '.join(FAILURE_MODES)}"
        )
    return str(mode)


_INF = math.inf


def _shifted(us: float, elapsed_us: int) -> float:
    if math.isinf(us):
        return us
    return max(0, round(us * 1_000_000) - elapsed_us) / 1_000_000


def _aged(decision: Decision, elapsed_us: int, cost: int, extra: int = 0) -> Decision:
    """``decision`` as seen ``elapsed_us`` later, for a request of ``cost``, ``extra`` more room.

    Built with ``make_decision`` (no frozen-dataclass ``replace``): this is the
    whole cost of a request answered by a lease or the negative cache.
    """
    layers = decision.layers
    if len(layers) == 1:
        layer = layers[0]
        reset, retry, refill = layer.reset_after, layer.retry_after, layer.refill_after
        # _shifted, inline: the lease hit's whole cost is here.
        if abs(reset) != _INF:
            reset = max(0, round(reset * 1_000_000) - elapsed_us) / 1_000_000
        if abs(retry) != _INF:
            retry = max(0, round(retry * 1_000_000) - elapsed_us) / 1_000_000
        if refill:
            refill = max(0, round(refill * 1_000_000) - elapsed_us) / 1_000_000
        aged = make_decision(
            layer.allowed,
            layer.limit,
            layer.remaining + extra,
            reset,
            retry,
            layer.delay,
            layer.rate,
            cost,
            (),
            False,
            "",
            refill,
        )
        if (
            layer.remaining == decision.remaining
            and layer.reset_after == decision.reset_after
            and layer.retry_after == decision.retry_after
            and layer.refill_after == decision.refill_after
            and layer.allowed is decision.allowed
            and layer.rate is decision.rate
            and layer.limit == decision.limit
            and layer.delay == decision.delay
        ):
            # One rate: the decision is its layer (the usual case); age the numbers once.
            return make_decision(
                aged.allowed,
                aged.limit,
                aged.remaining,
                aged.reset_after,
                aged.retry_after,
                aged.delay,
                aged.rate,
                cost,
                (aged,),
                False,
                "",
                aged.refill_after,
            )
        return _aged_one(decision, elapsed_us, cost, extra, (aged,))
    aged_layers = tuple([_aged_one(layer, elapsed_us, cost, extra, ()) for layer in layers])
    return _aged_one(decision, elapsed_us, cost, extra, aged_layers)


def _aged_one(
    d: Decision, elapsed_us: int, cost: int, extra: int, layers: tuple[Decision, ...]
) -> Decision:
    return make_decision(
        d.allowed,
        d.limit,
        d.remaining + extra,
        _shifted(d.reset_after, elapsed_us),
        _shifted(d.retry_after, elapsed_us),
        d.delay,
        d.rate,
        cost,
        layers,
        False,
        "",
        _shifted(d.refill_after, elapsed_us),
    )


def _assumed(rates: tuple[Rate, ...], cost: int, mode: str, wait: float) -> Decision:
    """A decision the store did not make: open (allowed, nothing counted) or closed (denied).

    Closed waits ``wait`` for everything (the store is asked again then), its
    effective window included; open knows no window (0).
    """
    allowed = mode == "open"

    def one(rate: Rate, layers: tuple[Decision, ...]) -> Decision:
        return make_decision(
            allowed,
            rate.limit,
            rate.limit if allowed else 0,
            0.0 if allowed else wait,
            0.0 if allowed else wait,
            0.0,
            rate,
            cost,
            layers,
            degraded=mode,
            refill_after=0.0 if allowed else wait,
        )

    binding = min(rates, key=lambda rate: rate.limit / rate.period_us)
    return one(binding, tuple(one(rate, ()) for rate in rates))


def _marked(decision: Decision, mode: str) -> Decision:
    """``decision`` with ``degraded=mode`` (``make_decision``: no dataclasses.replace)."""
    d = decision
    return make_decision(
        d.allowed,
        d.limit,
        d.remaining,
        d.reset_after,
        d.retry_after,
        d.delay,
        d.rate,
        d.cost,
        d.layers,
        shadowed=d.shadowed,
        degraded=mode,
        refill_after=d.refill_after,
    )


class _TwoTierBase:
    """Settings, the in-process parts, and the decision flow; everything but the store call."""

    def __init__(
        self,
        algorithm: str,
        clock: Clock,
        *,
        local: LocalRates,
        lease: int | None,
        lease_ttl: float | None,
        negative_cache: int | None,
        failure: str,
        breaker: CircuitBreaker | None,
        metrics: Metrics | None,
        name: str,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"two-tier name {name!r} must be a non-empty string")
        self.algorithm: str = algorithms.get(algorithm).NAME
        self.clock = clock
        self.name = name
        self.failure = _check_mode(failure)
        self.metrics: Metrics = metrics if metrics is not None else NO_METRICS
        self.breaker = (
            breaker
            if breaker is not None
            else CircuitBreaker(clock=clock, metrics=self.metrics, name=name)
        )
        if not isinstance(self.breaker, CircuitBreaker):
            raise ConfigurationError(f"breaker {breaker!r} must be a CircuitBreaker")
        self._local_for: Callable[[tuple[Rate, ...]], tuple[Rate, ...]] | None = local_rates(local)
        self.local = MemoryStore(clock=clock, max_keys=DEFAULT_LOCAL_KEYS)
        self.leases = None if lease is None else LeaseBook(lease)
        self._lease_ttl_us = _lease_ttl(lease_ttl)
        self.negative = None if negative_cache is None else NegativeCache(negative_cache)
        self.counts = TierCounts()
        self._log = LogRateLimiter(60.0, clock=clock)
        # id(rates tuple) -> (the tuple, its checked rates); kept so that its id stays its own.
        self._checked: dict[int, tuple[object, tuple[Rate, ...]]] = {}

    # -- the decision, written once

    def _flow(self, key: str, rates: Rate | Sequence[Rate], cost: int, failure: str | None) -> Flow:
        started = self._start(key, rates, cost, failure)
        if isinstance(started, _Pending):
            return (yield from self._rest(started))
        return started

    def _start(
        self, key: str, rates: Rate | Sequence[Rate], cost: int, failure: str | None
    ) -> Decision | _Pending:
        """The part of ``_flow`` that never asks the store, as a plain call.

        A Decision when this process answers (a cached denial, the local bucket's
        denial, a lease); otherwise what ``_rest`` needs to go on. Lease hits, the
        usual answer with leases on, so make no generator at all.
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
        mode = self.failure if failure is None else _check_mode(failure)
        now = self.clock.now_us()
        if cost == 0:
            return _Pending(key, found, 0, mode, None, now, False)
        ident = (key, found)
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
                return self._from_lease(held, cost, now)
            return _Pending(key, found, cost, mode, local, now, True)
        return _Pending(key, found, cost, mode, local, now, False)

    def _rest(self, pending: _Pending) -> Flow:
        """The rest of ``_flow`` after ``_start``: buy a lease, or ask the store."""
        key, rates, cost, mode, local, now, leased = pending
        if leased:
            return (yield from self._leased((key, rates), cost, mode, local, now))
        return (yield from self._global(key, rates, cost, mode, local, now))

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
        return _aged(denial.decision, now - denial.at_us, cost)

    def _global(
        self,
        key: str,
        rates: tuple[Rate, ...],
        cost: int,
        mode: str,
        local: Decision | None,
        now: int,
    ) -> Flow:
        reply = yield from self._ask(cost)
        if isinstance(reply, str):
            return self._degrade(key, rates, cost, mode, local, reply)
        if not reply.allowed and self.negative is not None:
            self.negative.remember((key, rates), reply, now)
        return reply

    def _leased(
        self, ident: _Ident, cost: int, mode: str, local: Decision | None, now: int
    ) -> Flow:
        """No balance covered ``cost`` (``_flow`` tried): buy a lease, or ask for this request."""
        book = self.leases
        assert book is not None
        if not book.start_buying(ident):
            # Another request is buying this key's lease: ask for this request alone.
            return (yield from self._global(ident[0], ident[1], cost, mode, local, now))
        try:
            return (yield from self._buy(ident, cost, mode, local, now))
        finally:
            book.stop_buying(ident)

    def _buy(self, ident: _Ident, cost: int, mode: str, local: Decision | None, now: int) -> Flow:
        book = self.leases
        assert book is not None
        held = book.spend(ident, cost, now)  # a buyer may have topped it up just before
        if held is not None:
            self.counts.add("lease_hits")
            return self._from_lease(held, cost, now)
        short = book.shortfall(ident, cost, now)
        buy = max(book.units, short)
        reply = yield from self._ask(buy)
        if isinstance(reply, Decision) and not reply.allowed and buy > short:
            # Near the limit a whole lease may not fit: buy what is left (on every layer), at
            # least the shortfall.
            left = min((layer.remaining for layer in reply.layers), default=reply.remaining)
            buy = max(short, min(buy, left))
            reply = yield from self._ask(buy)
        if isinstance(reply, str):
            return self._degrade(ident[0], ident[1], cost, mode, local, reply)
        if not reply.allowed:
            # Remembered for shortfalls of at least what was refused (``reply.cost``, the
            # shortfall itself unless another process took units between the two asks).
            if self.negative is not None:
                self.negative.remember(ident, reply, now)
            return replace(reply, cost=cost)
        self.counts.add("leases_bought")
        ttl = self._lease_ttl_us or max(rate.period_us for rate in ident[1])
        return self._from_lease(book.credit(ident, reply, cost, now, ttl), cost, now)

    @staticmethod
    def _from_lease(held: Balance, cost: int, now: int) -> Decision:
        """An allowed Decision paid from a lease: the grant, aged, with the units still held."""
        return _aged(held.grant, now - held.granted_us, cost, held.units)

    def _ask(self, cost: int) -> _Ask:
        """One store call through the breaker: its Decision, or why there is none."""
        breaker = self.breaker
        if not breaker.allow():
            return "breaker_open"
        self.counts.add("store_calls")
        try:
            reply = yield cost
        except BaseException:
            breaker.abandon()
            raise
        if isinstance(reply, Decision):
            breaker.success()
            return reply
        breaker.failure()
        return type(reply).__name__

    def _degrade(
        self,
        key: str,
        rates: tuple[Rate, ...],
        cost: int,
        mode: str,
        local: Decision | None,
        reason: str,
    ) -> Decision:
        self.counts.add("degraded")
        self.metrics.degraded(rule=self.name, mode=mode, reason=reason)
        self._log.log(
            log,
            logging.WARNING,
            f"{self.name}/{reason}",
            "ratewarden %s: store unavailable (%s); failure policy %r answers",
            self.name,
            reason,
            mode,
        )
        if mode == "local":
            if local is None:
                local = self.local.hit(LOCAL_ALGORITHM, key, rates, cost)
            return _marked(local, mode)
        wait = self.breaker.retry_in() or self.breaker.cooldown
        return _assumed(rates, cost, mode, wait)

    def _finish(self, decision: Decision, shadow: bool) -> Decision:
        if shadow and not decision.allowed:
            decision = replace(decision, allowed=True, shadowed=True)
        metrics = self.metrics
        if metrics is not NO_METRICS:
            metrics.decision(rule=self.name, algorithm=self.algorithm, decision=decision)
        return decision

    def _forget(self, key: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
        """Drop what this process holds for ``key``: cached denial, lease, local bucket."""
        found = check_rates(rates)
        check_key(key)
        if self.negative is not None:
            self.negative.forget((key, found))
        if self.leases is not None:
            self.leases.forget((key, found))
        self.local.reset(LOCAL_ALGORITHM, key, found)
        if self._local_for is not None:
            self.local.reset(LOCAL_ALGORITHM, key, self._local_for(found))
        return found


def _lease_ttl(ttl: float | None) -> int:
    """Whole microseconds, or 0 for "the longest period of the rates"."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"lease_ttl {ttl!r} must be a positive number of seconds")
    return max(1, math.ceil(ttl * 1_000_000))
