"""``PrometheusMetrics``: the hooks of ``ratewarden.metrics`` recorded as Prometheus metrics.

``prometheus_client`` is imported when one is built, never when this module is imported.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ratewarden.checks import keywords_checked
from ratewarden.decision import Decision
from ratewarden.histograms import observe_many
from ratewarden.labels import bounded
from ratewarden.metrics._hooks import (
    BUDGET_OUTCOMES,
    IDEMPOTENCY_OUTCOMES,
    SLOT_OUTCOMES,
    Metrics,
)

__all__ = ["LATENCY_BUCKETS", "PrometheusMetrics"]

#: Seconds; spans an in-process memory store (microseconds) to a slow Redis round trip.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)

_BREAKER_STATES = ("closed", "open", "half_open")
#: The budget outcomes whose tokens ``ratewarden_budget_tokens_total`` adds up, by stage.
_TOKEN_STAGES = ("reserved", "settled")


def _checked(what: str, outcome: str, known: tuple[str, ...]) -> str:
    if outcome not in known:
        raise ValueError(f"{what} outcome must be one of {known}, got {outcome!r}")
    return outcome


_OUTCOMES = ("allowed", "denied", "shadowed")


def _outcome(decision: Decision) -> str:
    if decision.shadowed:
        return "shadowed"
    return "allowed" if decision.allowed else "denied"


class PrometheusMetrics(Metrics):
    """The hooks recorded as Prometheus metrics in ``registry``.

    With ``namespace="ratewarden"`` the metrics are:

    - ``ratewarden_decisions_total{rule, algorithm, outcome}``: outcome is
      ``allowed``, ``denied`` or ``shadowed`` (denied, but let through by shadow mode).
    - ``ratewarden_degraded_total{rule, failure_mode, reason}``: a failure mode answered
      (the label was ``mode`` before).
    - ``ratewarden_shed_decisions_total{rule, traffic_class, outcome}``: a load
      shedder's answers, outcome ``admitted`` or ``shed``.
    - ``ratewarden_breaker_state{name, state}``: 1 for the current state, else 0.
    - ``ratewarden_breaker_transitions_total{name, state}``: entries into each state.
    - ``ratewarden_store_latency_seconds``: histogram of store round trips.
    - ``ratewarden_region_overshoot_requests{region}``: requests admitted past a
      global limit, as the last multi-region sync of that region saw it.
    - ``ratewarden_slots_total{rule, outcome}``: a concurrency middleware's slots,
      outcome ``acquired``, ``refused``, ``released``, ``release_failed``, ``renewed``,
      ``renew_failed`` or ``lapsed`` (``Metrics.slot``).
    - ``ratewarden_budget_reservations_total{rule, outcome}``: a token budget
      middleware's reservations, outcome ``reserved``, ``refused``, ``settled``,
      ``settle_failed`` or ``expired`` (``Metrics.budget_reservation``).
    - ``ratewarden_budget_tokens_total{rule, stage}``: their tokens, stage ``reserved``
      (the estimates) or ``settled`` (what was used): the difference is what the
      estimates held too much.
    - ``ratewarden_idempotency_requests_total{rule, outcome}``: an Idempotency-Key
      middleware's requests, outcome ``ran``, ``replayed``, ``in_flight``,
      ``mismatched``, ``bad_key``, ``key_missing``, ``too_large``, ``client_gone``,
      ``store_failed`` or ``unguarded`` (``Metrics.idempotency_request``).

    ``registry`` defaults to prometheus_client's global ``REGISTRY``; pass a
    fresh ``CollectorRegistry`` in tests, or to build two instances in one process.
    """

    __slots__ = (
        "_breaker_state",
        "_breaker_transitions",
        "_budget_reservations",
        "_budget_tokens",
        "_decision_children",
        "_decisions",
        "_degraded",
        "_idempotency",
        "_lock",
        "_max_rules",
        "_region_overshoot",
        "_rules",
        "_shed",
        "_slots",
        "_store_latency",
        "registry",
    )

    @keywords_checked
    def __init__(
        self, registry: Any = None, namespace: str = "ratewarden", *, max_rules: int = 1000
    ) -> None:
        try:
            import prometheus_client
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "PrometheusMetrics needs prometheus_client: pip install 'ratewarden[metrics]'"
            ) from exc
        if max_rules < 1:
            raise ValueError(f"max_rules must be at least 1, got {max_rules!r}")
        if registry is None:
            registry = prometheus_client.REGISTRY
        self.registry = registry
        self._max_rules = max_rules
        self._rules: set[str] = set()
        self._lock = threading.Lock()
        # (rule, algorithm, outcome) -> the counter's child: labels() validates and locks on
        # every call. Bounded: rules by max_rules (then "other"), algorithms and outcomes fixed.
        self._decision_children: dict[tuple[str, str, str], Any] = {}
        counter, gauge = prometheus_client.Counter, prometheus_client.Gauge

        def made(kind: Any, name: str, doc: str, labels: tuple[str, ...] = (), **extra: Any) -> Any:
            """One metric of this instance: its namespace, its registry."""
            return kind(name, doc, labels, namespace=namespace, registry=registry, **extra)

        self._decisions = made(
            counter,
            "decisions",
            "Rate limit decisions, by rule, algorithm and outcome.",
            ("rule", "algorithm", "outcome"),
        )
        self._degraded = made(
            counter,
            "degraded",
            "Decisions answered by a failure mode because the store was unavailable.",
            ("rule", "failure_mode", "reason"),
        )
        self._shed = made(
            counter,
            "shed_decisions",
            "Load shedding decisions, by rule, traffic class and outcome (admitted or shed).",
            ("rule", "traffic_class", "outcome"),
        )
        self._breaker_state = made(
            gauge,
            "breaker_state",
            "1 for the circuit breaker's current state, 0 for the others.",
            ("name", "state"),
        )
        self._breaker_transitions = made(
            counter,
            "breaker_transitions",
            "Circuit breaker entries into each state.",
            ("name", "state"),
        )
        self._store_latency = made(
            prometheus_client.Histogram,
            "store_latency_seconds",
            "Store round trip time.",
            buckets=LATENCY_BUCKETS,
        )
        self._region_overshoot = made(
            gauge,
            "region_overshoot_requests",
            "Requests admitted past a global limit, as the last multi-region sync saw it.",
            ("region",),
        )
        self._slots = made(
            counter,
            "slots",
            "Concurrency middleware slots, by rule and outcome.",
            ("rule", "outcome"),
        )
        self._budget_reservations = made(
            counter,
            "budget_reservations",
            "Token budget middleware reservations, by rule and outcome.",
            ("rule", "outcome"),
        )
        self._budget_tokens = made(
            counter,
            "budget_tokens",
            "Tokens of token budget middleware reservations, by rule and stage (reserved, "
            "settled).",
            ("rule", "stage"),
        )
        self._idempotency = made(
            counter,
            "idempotency_requests",
            "Requests an Idempotency-Key middleware handled, by rule and outcome.",
            ("rule", "outcome"),
        )

    def _rule(self, rule: str) -> str:
        if rule in self._rules:
            return rule
        rule = bounded(rule)  # the set holds bounded names: a long rule is hashed per call
        with self._lock:
            if rule not in self._rules:
                if len(self._rules) >= self._max_rules:
                    return "other"
                self._rules.add(rule)
        return rule

    def decision(self, *, rule: str, algorithm: str, decision: Decision) -> None:
        self.count(rule=rule, algorithm=algorithm, outcome=_outcome(decision))

    def count(self, *, rule: str, algorithm: str, outcome: str, by: int = 1) -> None:
        """``by`` decisions of ``outcome`` (``allowed``, ``denied``, ``shadowed``) at once:
        what a caller that tallies its decisions first reports when it flushes."""
        labels = (self._rule(rule), algorithm, outcome)
        child = self._decision_children.get(labels)
        if child is None:
            if outcome not in _OUTCOMES:
                raise ValueError(f"outcome must be one of {_OUTCOMES}, got {outcome!r}")
            child = self._decision_children[labels] = self._decisions.labels(
                labels[0], bounded(algorithm), outcome
            )
        child.inc(by)

    def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None:
        self._degraded.labels(self._rule(rule), bounded(failure_mode), bounded(reason)).inc()

    def shed_decision(self, *, rule: str, traffic_class: str, admitted: bool) -> None:
        outcome = "admitted" if admitted else "shed"
        self._shed.labels(self._rule(rule), bounded(traffic_class), outcome).inc()

    def breaker(self, *, name: str, state: str) -> None:
        if state not in _BREAKER_STATES:
            raise ValueError(f"breaker state must be one of {_BREAKER_STATES}, got {state!r}")
        name = bounded(name)
        for known in _BREAKER_STATES:
            self._breaker_state.labels(name, known).set(1.0 if known == state else 0.0)
        self._breaker_transitions.labels(name, state).inc()

    def store_latency(self, *, seconds: float) -> None:
        self._store_latency.observe(seconds)

    def store_latencies(self, *, seconds: Sequence[float]) -> None:
        observe_many(self._store_latency, seconds)  # the buckets and sum once, not per sample

    def region_overshoot(self, *, region: str, requests: int) -> None:
        self._region_overshoot.labels(bounded(region)).set(float(requests))

    def slot(self, *, rule: str, outcome: str) -> None:
        outcome = _checked("slot", outcome, SLOT_OUTCOMES)
        self._slots.labels(self._rule(rule), outcome).inc()

    def budget_reservation(self, *, rule: str, outcome: str, tokens: int) -> None:
        outcome = _checked("budget reservation", outcome, BUDGET_OUTCOMES)
        rule = self._rule(rule)
        self._budget_reservations.labels(rule, outcome).inc()
        if outcome in _TOKEN_STAGES and tokens:
            self._budget_tokens.labels(rule, outcome).inc(tokens)

    def idempotency_request(self, *, rule: str, outcome: str) -> None:
        outcome = _checked("idempotency request", outcome, IDEMPOTENCY_OUTCOMES)
        self._idempotency.labels(self._rule(rule), outcome).inc()

    def __repr__(self) -> str:
        return f"PrometheusMetrics(registry={self.registry!r})"
