"""The part of a hit this process answers alone: checks, cached denial, local bucket, lease.

``LocalTier._start`` runs before any store call (see ``_core`` for the whole
order). It answers with a Decision when this process can (a cached denial, the
local bucket's denial, a lease balance), and otherwise hands a ``Pending`` on to
the store part. ``LocalTier`` is part of ``DecisionCore``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ratewarden.checks import check_cost, check_key
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.limiter._counts import TierCounts
from ratewarden.limiter._leases import LeaseBook
from ratewarden.limiter._settings import (
    FAILURE_MODES,
    LOCAL_ALGORITHM,
    FailureHook,
    Pending,
    check_failure_mode,
    from_lease,
)
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage.memory import MemoryStore

__all__ = ["LocalTier"]

_Ident = tuple[str, str, tuple[Rate, ...]]
#: ``tuple.__new__``: a ``Pending`` made on every hit without the NamedTuple's ``__new__``.
_tuple = tuple.__new__
_INF = math.inf
#: Rates tuples whose lease size was checked, per limiter, before it starts again from empty.
_SIZED_KEYS = 1024

log = logging.getLogger("ratewarden.limiter")


class LocalTier:
    """The in-process part of a hit; mixed into ``DecisionCore``."""

    # Made by DecisionCore.__init__; declared here for the type checker.
    clock: Clock
    name: str
    failure_mode: str | None
    local: MemoryStore
    leases: LeaseBook | None
    counts: TierCounts
    _local_for: Callable[[tuple[Rate, ...]], tuple[Rate, ...]] | None
    _checked: dict[int, tuple[object, str, tuple[Rate, ...]]]
    _sized: set[tuple[Rate, ...]]

    if TYPE_CHECKING:  # DecisionCore's and Leasing's own

        def _check(self, algorithm: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]: ...

        def _cached_denial(self, ident: _Ident, cost: int, now: int) -> Decision | None: ...

    def _start(
        self,
        name: str,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int,
        failure_mode: str | None,
        on_failure: FailureHook | None,
        via: Callable[..., Any] | None = None,
    ) -> Decision | Pending:
        """The part of a hit that never asks the store, as a plain call.

        A Decision when this process answers (a cached denial, the local bucket's
        denial, a lease); otherwise what the store part needs to go on.
        """
        # Checked for the algorithm before anything here is spent (``_check``).
        known = self._checked.get(id(rates))
        if known is not None and known[0] is rates and known[1] == name:
            found = known[2]
        else:
            found = self._check(name, rates)
        if type(cost) is not int or cost < 0:
            check_cost(cost)
        if type(key) is not str or not key:
            check_key(key)
        mode = failure_mode
        if failure_mode is None:
            mode = self.failure_mode
        elif failure_mode not in FAILURE_MODES:  # the usual names are taken without a call
            check_failure_mode(failure_mode)
        now = self.clock.now_us()
        if cost == 0:
            return _tuple(
                Pending, (name, key, found, rates, 0, mode, None, now, False, on_failure, via)
            )
        ident = (name, key, found)
        cached = self._cached_denial(ident, cost, now)
        if cached is not None:
            return cached
        local = None
        if self._local_for is not None:
            local = self.local.hit(LOCAL_ALGORITHM, key, self._local_for(found), cost)
            # A cost the bucket can never hold (retry_after inf: above its capacity) is not
            # the bucket's to refuse: the store decides it (the denial consumed nothing
            # here), and in an outage the ``local`` failure mode denies it (``_degrade``).
            if not local.allowed and local.retry_after != _INF:
                self.counts.add("local_denials")
                return local
        leases = self.leases
        if leases is not None:
            held = leases.spend(ident, cost, now)
            if held is not None:
                self.counts.add("lease_hits")
                return from_lease(held, cost, now)
            if found not in self._sized:  # a lease to buy: checked once per rates
                self._check_lease_size(found)
            return _tuple(
                Pending, (name, key, found, rates, cost, mode, local, now, True, on_failure, via)
            )
        return _tuple(
            Pending, (name, key, found, rates, cost, mode, local, now, False, on_failure, via)
        )

    def _check_lease_size(self, rates: tuple[Rate, ...]) -> None:
        """Warn, once per limiter and rates, of a lease larger than half a rate's capacity:
        one process's first request would buy most of the key's bucket, and the others be
        denied while those units wait unspent. Not refused: the bounds hold for any ``k``,
        and a rule added later with a small rate must not fail every request."""
        assert self.leases is not None
        k = self.leases.units
        if len(self._sized) >= _SIZED_KEYS:
            self._sized.clear()
        self._sized.add(rates)
        for rate in rates:
            if 2 * k > rate.capacity:
                log.warning(
                    "ratewarden %s: lease=%d is more than half of rate %s (%d back to back): "
                    "one process's first request buys most of the key's bucket, and other "
                    "processes are denied while those units wait unspent (up to lease_ttl). "
                    "Size k well under the limit divided by the number of processes "
                    "(docs/two-tiers.md, Sizing k)",
                    self.name,
                    k,
                    rate,
                    rate.capacity,
                )
                return
