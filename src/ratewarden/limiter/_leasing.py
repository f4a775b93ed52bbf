"""The remembered part of the local tier: cached denials and leased units, one mixin.

A denial the store made is answered here until its retry time, unless a lease
balance covers the cost; a lease buys ``k`` units in one store call and spends
them in this process. ``Leasing`` is part of ``DecisionCore`` (see ``_core``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.limiter._aged import aged
from ratewarden.limiter._counts import TierCounts
from ratewarden.limiter._flows import Flow
from ratewarden.limiter._leases import LeaseBook
from ratewarden.limiter._negative import NegativeCache
from ratewarden.limiter._settings import Pending, algorithm_name, from_lease
from ratewarden.rate import Rate

__all__ = ["Leasing"]

_Ident = tuple[str, str, tuple[Rate, ...]]


class Leasing:
    """The negative cache and the leases of a hit; mixed into ``DecisionCore``."""

    # Made by DecisionCore.__init__; declared here for the type checker.
    algorithm: str
    clock: Clock
    leases: LeaseBook | None
    negative: NegativeCache | None
    counts: TierCounts
    _lease_ttl_us: int

    if TYPE_CHECKING:  # DecisionCore's own

        def _check(self, algorithm: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]: ...

        def _global(self, p: Pending, units: int) -> Flow[Decision]: ...

        def _ask(self, p: Pending, units: int) -> Flow[Decision | Exception]: ...

        def _degrade(self, p: Pending, error: Exception) -> Decision: ...

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
        name = self.algorithm if algorithm is None else algorithm_name(algorithm)
        ident = (name, key, self._check(name, rates))
        if ident not in negative:  # the common case: nothing remembered
            return None
        return self._cached_denial(ident, cost, self.clock.now_us())

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

    def _leased(self, p: Pending) -> Flow[Decision]:
        """No balance covered the cost (``_start`` tried): buy a lease, or ask for this request."""
        book = self.leases
        assert book is not None
        ident = (p.algorithm, p.key, p.rates)
        if not book.start_buying(ident):
            # Another request is buying this key's lease: ask for this request alone. If that
            # is denied, the units the buyer has credited meanwhile (already charged to the
            # store) may pay for it: else a burst strands them until lease_ttl.
            decision = yield from self._global(p, p.cost)
            if not decision.allowed:
                now = self.clock.now_us()
                held = book.spend(ident, p.cost, now)
                if held is not None:
                    self.counts.add("lease_hits")
                    return from_lease(held, p.cost, now)
            return decision
        try:
            return (yield from self._buy(p, book, ident))
        finally:
            book.stop_buying(ident)

    def _buy(self, p: Pending, book: LeaseBook, ident: _Ident) -> Flow[Decision]:
        cost, now = p.cost, p.now
        held = book.spend(ident, cost, now)  # a buyer may have topped it up just before
        if held is not None:
            self.counts.add("lease_hits")
            return from_lease(held, cost, now)
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
        return from_lease(book.credit(ident, reply, cost, now, ttl), cost, now)
