"""Instrumentation hooks, a Prometheus backend, and a rate limiter for log lines.

Code that makes decisions takes a ``Metrics`` and calls its hooks; the
base class does nothing, so instrumentation costs a method call when it is off.
``PrometheusMetrics`` records the hooks as Prometheus counters, gauges and a
histogram; ``prometheus_client`` is imported when one is built, never when this
module is imported, so the core has no hard dependency on it.

Label values are rule names, algorithm names, failure modes and breaker states:
never raw keys. A rule label past ``max_rules`` distinct values is recorded as
``"other"`` so that a misconfigured caller cannot grow the registry without bound.
Every label value is also cut to ``MAX_LABEL_CHARS`` (128) characters, a longer
one ending in ``…`` and a hash of the whole (``ratewarden.labels.bounded``): a
rule named after a request value cannot make the series long either.

``LogRateLimiter`` keeps a storm of identical failures (a Redis outage seen by
every request) to one log line per key per interval, and counts what it held back.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock, SystemClock
from ratewarden.decision import Decision
from ratewarden.histograms import observe_many
from ratewarden.labels import bounded

__all__ = ["NO_METRICS", "LogRateLimiter", "Metrics", "PrometheusMetrics"]

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

    ``registry`` defaults to prometheus_client's global ``REGISTRY``; pass a
    fresh ``CollectorRegistry`` in tests, or to build two instances in one process.
    """

    __slots__ = (
        "_breaker_state",
        "_breaker_transitions",
        "_decision_children",
        "_decisions",
        "_degraded",
        "_lock",
        "_max_rules",
        "_region_overshoot",
        "_rules",
        "_shed",
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

    def __repr__(self) -> str:
        return f"PrometheusMetrics(registry={self.registry!r})"


class LogRateLimiter:
    """At most one log line per key per ``interval`` seconds, counting the rest.

    ``allow(key)`` says whether a line for ``key`` may be written now;
    ``suppressed(key)`` is how many were held back since the last one written.
    ``log`` does both and appends the count to the line. At most ``max_keys``
    keys are remembered (least recently allowed forgotten first). Thread-safe.

    >>> from ratewarden.testing import ManualClock
    >>> limiter = LogRateLimiter(interval=60, clock=ManualClock(0))
    >>> limiter.allow("redis down"), limiter.allow("redis down"), limiter.suppressed("redis down")
    (True, False, 1)
    """

    __slots__ = ("_clock", "_entries", "_lock", "interval", "max_keys")

    @keywords_checked
    def __init__(
        self, interval: float = 60.0, *, clock: Clock | None = None, max_keys: int = 1024
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self.interval = float(interval)
        self.max_keys = max_keys
        self._clock: Clock = clock if clock is not None else SystemClock()
        # key -> [time of the last allowed line, lines suppressed since]
        self._entries: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        """True if a line for ``key`` may be written now (and start a new interval)."""
        return self._take(key) >= 0

    def _take(self, key: str) -> int:
        # -1 when suppressed; otherwise the count held back before this line.
        now = self._clock.now()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now - entry[0] < self.interval:
                entry[1] += 1
                return -1
            held_back = 0 if entry is None else int(entry[1])
            self._entries[key] = [now, 0]
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_keys:
                self._entries.popitem(last=False)
            return held_back

    def suppressed(self, key: str) -> int:
        """Lines for ``key`` held back since the last one allowed."""
        with self._lock:
            entry = self._entries.get(key)
            return 0 if entry is None else int(entry[1])

    def log(
        self,
        logger: logging.Logger,
        level: int,
        key: str,
        msg: str,
        *args: object,
        extra: Mapping[str, object] | None = None,
    ) -> bool:
        """Write ``msg % args`` to ``logger`` if ``key`` is allowed; return whether it was.

        The line says how many similar lines were suppressed before it. ``extra``: the
        record's fields, as ``Logger.log`` takes them (``{"event": ...}`` for serve's lines).
        """
        held_back = self._take(key)
        if held_back < 0:
            return False
        if held_back:
            lines = "line" if held_back == 1 else "lines"
            logger.log(
                level, msg + f" (%d similar {lines} suppressed)", *args, held_back, extra=extra
            )
        else:
            logger.log(level, msg, *args, extra=extra)
        return True

    def __repr__(self) -> str:
        return f"LogRateLimiter(interval={self.interval!r}, max_keys={self.max_keys!r})"
