"""TwoTier / AsyncTwoTier: a limiter with the two-tier defaults.

The two tiers are the decision core's own parts (``ratewarden.limiter``): a
negative cache, an optional local bucket and leases in front of the global
store, a circuit breaker and a failure mode behind it. ``TwoTier`` is a
``Limiter`` that turns them on by default: a negative cache of 10,000 keys, a
breaker of its own, and fail open (Envoy's default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.deprecation import OPEN, UNSET, renamed
from ratewarden.limiter import (
    DECISION_HOOKS,
    DEFAULT_NEGATIVE_KEYS,
    AsyncLimiter,
    CircuitBreaker,
    DecisionCore,
    Limiter,
    LocalRates,
    NegativeCache,
    arguments_checked,
    check_failure_mode,
    check_metrics,
)
from ratewarden.metrics import Metrics

if TYPE_CHECKING:
    # Named as strings in the twins' bases (types only: tiers import no store).
    from ratewarden.storage import AsyncStore, Store  # noqa: F401

__all__ = ["AsyncTwoTier", "TwoTier"]

#: The store a twin takes: ``Store`` or ``AsyncStore``.
S = TypeVar("S")


#: The default of ``failure_mode``: ``open`` when it was not given, told apart from
#: ``failure_mode="open"`` given beside the deprecated ``failure=`` (both given: refused).
_OPEN: Any = OPEN


class _TwoTierDefaults(DecisionCore, Generic[S]):
    """The options of a limiter with the two-tier defaults, written once for both twins."""

    @keywords_checked
    def __init__(
        self,
        store: S | None = None,
        algorithm: str = "gcra",
        *,
        local: LocalRates = None,
        negative_cache: int | NegativeCache | None = DEFAULT_NEGATIVE_KEYS,
        lease: int | None = None,
        lease_ttl: float | None = None,
        failure_mode: str = _OPEN,
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "default",
        clock: Clock | None = None,
        failure: str = UNSET,
    ) -> None:
        # ``failure`` is the deprecated name of ``failure_mode`` (one release). The warning
        # names the building line, past this frame and the keyword check's (stacklevel 4).
        what = type(self).__name__
        failure_mode = renamed(
            what, "failure", "failure_mode", failure, failure_mode, _OPEN, stacklevel=4
        )
        if failure_mode is _OPEN:
            failure_mode = "open"
        # The breaker made for it is told of every transition: that hook is checked by this name.
        hooks = DECISION_HOOKS if breaker is not None else (*DECISION_HOOKS, "breaker")
        metrics = check_metrics(what, metrics, hooks)
        super().__init__(
            store,
            algorithm,
            local=local,
            negative_cache=negative_cache,
            lease=lease,
            lease_ttl=lease_ttl,
            failure_mode=check_failure_mode(failure_mode),
            breaker=breaker,
            metrics=metrics,
            name=name,
            clock=clock,
        )
        if self.breaker is None:
            self.breaker = CircuitBreaker(
                clock=self.clock,
                metrics=metrics,
                name=name,
                per_node=True,  # a Cluster primary's outage opens that primary's circuit only
            )
        self.plain = False


class TwoTier(_TwoTierDefaults["Store"], Limiter):
    """A local tier in this process in front of a global ``Store``; ``hit`` like ``Limiter.hit``.

    The options are ``Limiter``'s, with other defaults: ``negative_cache`` 10,000
    keys, ``failure_mode="open"`` (one is required: a two-tier limiter never
    raises for an outage), and a ``CircuitBreaker`` made for it when none is
    given (share one per store). ``hit`` never raises for a store outage: the
    failure mode answers and ``Decision.degraded`` names it.

    ``reset`` is not a decision, and no failure mode answers it. It forgets this
    process's part of the key first (its cached denial, lease and local bucket),
    then asks the store; a store that is down raises ``StorageUnavailableError``
    to the caller (its words "the failure mode decides" are said for hits; none
    decides a reset). The store then keeps the key's usage (after a timeout, it
    may have been reset): call ``reset`` again once the store answers.
    """

    # Limiter.hit, whose bad keywords are refused naming TwoTier.hit (not Limiter.hit).
    hit = arguments_checked(Limiter.hit)


class AsyncTwoTier(_TwoTierDefaults["AsyncStore"], AsyncLimiter):
    """The asyncio twin of ``TwoTier`` over an ``AsyncStore``; the same options."""

    hit = arguments_checked(AsyncLimiter.hit)
