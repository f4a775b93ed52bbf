"""The hooks: ``Metrics`` (every one a no-op), ``NO_METRICS``, and ``optional_hook``.

The outcome sets of the middlewares' hooks are here, beside the hooks that take them, so that
a backend (``PrometheusMetrics``) refuses a value outside them.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ratewarden.decision import Decision

__all__ = [
    "BUDGET_OUTCOMES",
    "IDEMPOTENCY_OUTCOMES",
    "NO_METRICS",
    "SLOT_OUTCOMES",
    "Metrics",
    "optional_hook",
]

#: ``Metrics.slot``'s outcomes: a concurrency middleware's slot taken or refused, then given
#: back or renewed (or the store failing at it, or a renewal finding it gone).
SLOT_OUTCOMES = (
    "acquired",
    "refused",
    "released",
    "release_failed",
    "renewed",
    "renew_failed",
    "lapsed",
)
#: ``Metrics.budget_reservation``'s outcomes: a token budget middleware's reservation made or
#: refused, then settled (or the store failing at the settlement, or the record gone).
BUDGET_OUTCOMES = ("reserved", "refused", "settled", "settle_failed", "expired")
#: ``Metrics.idempotency_request``'s outcomes: what an Idempotency-Key middleware did with a
#: request it handled.
IDEMPOTENCY_OUTCOMES = (
    "ran",
    "replayed",
    "in_flight",
    "mismatched",
    "bad_key",
    "key_missing",
    "too_large",
    "client_gone",
    "store_failed",
    "unguarded",
)


class Metrics:
    """Instrumentation hooks; every method is a no-op here (``store_latencies`` gives each
    to ``store_latency``). Subclass, or use PrometheusMetrics.

    ``degraded`` took ``mode=`` before it took ``failure_mode=``: a subclass
    whose ``degraded`` still takes ``mode`` (and no ``failure_mode``) is adapted
    when the class is made, with a ``DeprecationWarning``, and goes on being
    called with ``mode=`` for one release.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("degraded")
        if own is not None and _takes_mode_only(own):
            warnings.warn(
                f"{cls.__qualname__}.degraded(*, rule, mode, reason) is deprecated: its keyword "
                "is failure_mode now (degraded(*, rule, failure_mode, reason))",
                DeprecationWarning,
                stacklevel=2,  # the class statement
            )
            cls.degraded = _mode_keyword(own)  # type: ignore[method-assign]

    def decision(self, *, rule: str, algorithm: str, decision: Decision) -> None:
        """One decision was made for ``rule`` by ``algorithm`` (e.g. ``"gcra"``)."""

    def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None:
        """A failure mode answered for ``rule``: ``failure_mode`` is open, closed or local.

        ``reason`` should come from a small set (an exception class name), never a
        message with addresses or keys in it.
        """

    def breaker(self, *, name: str, state: str) -> None:
        """Circuit breaker ``name`` moved to ``state``: closed, open or half_open."""

    def store_latency(self, *, seconds: float) -> None:
        """One store round trip took ``seconds``."""

    def store_latencies(self, *, seconds: Sequence[float]) -> None:
        """Store round trips that took ``seconds`` each, reported together (a caller that
        tallies them first, at its flush). ``store_latency`` for each, in order, unless a
        subclass records them at once."""
        for one in seconds:
            self.store_latency(seconds=one)

    def shed_decision(self, *, rule: str, traffic_class: str, admitted: bool) -> None:
        """A load shedder admitted (or shed) a request of ``traffic_class`` (a class of its
        ``ShedPolicy``) for the middleware ``rule``; not called when a failure mode answered."""

    def slot(self, *, rule: str, outcome: str) -> None:
        """A concurrency middleware (named ``rule``) and one of its slots: ``acquired``,
        ``refused`` (none free: the request was refused), ``released`` (given back),
        ``release_failed`` (the store failed: the slot's TTL frees it), ``renewed`` (while a
        response streams), ``renew_failed`` (the store failed) or ``lapsed`` (a renewal found
        it gone: held past its TTL). ``acquired`` less ``released`` and ``release_failed`` is
        the slots held now. A request the failure mode answered is ``degraded``'s only."""

    def budget_reservation(self, *, rule: str, outcome: str, tokens: int) -> None:
        """A token budget middleware (named ``rule``) and one request's reservation:
        ``reserved`` (``tokens``: the estimate), ``refused`` (the budget is spent: 429;
        ``tokens``: the estimate asked), ``settled`` (``tokens``: what the request used, the
        estimate when that is unknown), ``settle_failed`` (the store failed: the reservation
        keeps its charge) or ``expired`` (its record was gone: nothing settled); ``tokens`` is
        0 for the last two. A request the failure mode answered is ``degraded``'s only."""

    def idempotency_request(self, *, rule: str, outcome: str) -> None:
        """An Idempotency-Key middleware (named ``rule``) handled a request (of its methods,
        with a key or needing one): ``ran`` (the first with its key: the app ran, holding the
        lock), ``replayed`` (the stored response sent again), ``in_flight`` (409: the first
        still runs), ``mismatched`` (422: the key came with another body or query),
        ``bad_key`` (400), ``key_missing`` (400: ``required``), ``too_large`` (413),
        ``client_gone`` (the client left before its body ended: nothing ran),
        ``store_failed`` (503: the store failed at ``begin``) or ``unguarded`` (the store
        failed and ``fail_open`` ran the app without the guarantee)."""

    def region_overshoot(self, *, region: str, requests: int) -> None:
        """After a sync, ``region`` saw ``requests`` admitted past a global limit (0 when within).

        Reported by ``ratewarden.regions.ReconciledBudget``: the largest overshoot
        over the keys of that sync round, from the merged counts of every region.
        """


NO_METRICS: Metrics = Metrics()


def _takes_mode_only(method: Callable[..., Any]) -> bool:
    """Whether ``degraded`` is written the old way: a ``mode`` keyword, no ``failure_mode``
    (nor ``**kwargs``, which takes either)."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # not introspectable: called the new way
        return False
    return (
        "mode" in parameters
        and "failure_mode" not in parameters
        and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    )


def _mode_keyword(method: Callable[..., None]) -> Callable[..., None]:
    """An old ``degraded(*, rule, mode, reason)`` called as ``degraded(*, rule, failure_mode,
    reason)``, as every caller now calls it."""

    @functools.wraps(method)
    def degraded(self: Metrics, *, rule: str, failure_mode: str, reason: str) -> None:
        method(self, rule=rule, mode=failure_mode, reason=reason)

    return degraded


def optional_hook(metrics: Metrics, name: str) -> Callable[..., None]:
    """``metrics``'s hook ``name``, or ``NO_METRICS``'s (a no-op) when its class has none: a
    metrics object of the caller's, written without subclassing ``Metrics`` before the hook
    was added, keeps being taken where it was (checked for the hooks it was asked for then),
    and what it has no hook for goes uncounted."""
    if callable(getattr(type(metrics), name, None)):
        return getattr(metrics, name)  # type: ignore[no-any-return]
    return getattr(NO_METRICS, name)  # type: ignore[no-any-return]
