"""The service's Prometheus metrics: envoyproxy/ratelimit's stats, then ratewarden's own.

``ServiceStats`` is the ``ServiceHooks`` that ``ratewarden serve`` installs; its ``registry`` is
what ``GET /metrics`` exposes. envoyproxy/ratelimit emits statsd stats that operators map to
Prometheus with statsd_exporter; the names here are the ones that mapping produces, so
dashboards carry over. prometheus_client adds ``_total`` to every counter name (the OpenMetrics
rule), and the descriptor path is one ``key`` label rather than statsd_exporter's ``key1``, ...:

========================================================  ==================================
ratelimit_service_rate_limit_total_hits_total             {domain, key}: hits asked for
ratelimit_service_rate_limit_over_limit_total             {domain, key}: hits over the limit
ratelimit_service_rate_limit_near_limit_total             {domain, key}: hits above the
                                                          near-limit ratio, under the limit
ratelimit_service_rate_limit_within_limit_total           {domain, key}: hits under the limit
ratelimit_service_rate_limit_shadow_mode_total            {domain, key}: over, let through
                                                          by the rule's shadow_mode
ratelimit_service_rate_limit_over_limit_with_local_cache_total  {domain, key}: hits over the
                                                          limit answered by the over-limit
                                                          cache, without a store call
ratelimit_service_rate_limit_failure_mode_allowed_total   {domain, key, failure_mode}:
                                                          descriptors a failure mode allowed
                                                          (store down)
ratelimit_service_rate_limit_failure_mode_denied_total    {domain, key, failure_mode}: ...
                                                          denied
ratelimit_service_rate_limit_value_overflow_total         {domain, rule}: new values past
                                                          --max-values-per-rule (key explosion)
ratelimit_service_rate_limit_domain_not_found_total       {domain}: descriptors of requests
                                                          to a domain the config does not know
ratelimit_service_should_rate_limit_error_total           {err_type}: store_error (one per
                                                          failed store call, and per call the
                                                          open circuit breaker kept from the
                                                          store), service_error
ratelimit_service_total_requests_total                    {grpc_method}: ShouldRateLimit calls
ratelimit_service_response_time_seconds                   histogram of ShouldRateLimit calls
ratelimit_service_config_load_success_total               config loads that succeeded
ratelimit_service_config_load_error_total                 config loads that failed
ratelimit_service_config_last_load_success_timestamp_seconds  when the config in use loaded
========================================================  ==================================

and, through ``ratewarden.metrics.PrometheusMetrics`` on the same registry,
``ratewarden_decisions_total{rule, algorithm, outcome}``, ``ratewarden_degraded_total{rule,
failure_mode, reason}`` and ``ratewarden_store_latency_seconds``.

With ``--workers N`` the processes share one view: ``ratewarden serve`` sets
``PROMETHEUS_MULTIPROC_DIR`` before it starts them, prometheus_client's multiprocess mode keeps
each worker's values in files there, and whichever worker answers ``GET /metrics`` adds them
all up (``exposition``).

``live`` is the dashboard's ``LiveStats``, fed by the same hooks.

The ``key`` label is envoyproxy/ratelimit's stats key without the domain: the config path
(``api_key`` or ``path_/login``), bounded by the config. Request values appear only where the
config asks (``detailed_metric``, ``value_to_metric``) or for Envoy's per-descriptor limit
overrides. As a guard, at most ``max_keys`` distinct ``(domain, key)`` pairs are kept; later
ones are counted under ``key="other"``; the ``rule`` label of ``value_overflow`` (an override's
rule is named after its values) is capped the same way, and the ``domain`` label of
``domain_not_found`` (any name a caller sends) at ``MAX_UNKNOWN_DOMAINS`` names. Every label
value is at most ``MAX_LABEL_CHARS`` (128) characters: a longer one keeps its start and ends in
``…`` and a hash of the whole (``ratewarden.labels.bounded``), so a 60 KiB header value makes a
series of the same size as a short one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from ratewarden.clock import Clock, SystemClock
from ratewarden.histograms import observe_many
from ratewarden.labels import bounded
from ratewarden.metrics import LATENCY_BUCKETS, PrometheusMetrics
from ratewarden.server.config import DescriptorRule
from ratewarden.server.dashboard.live import LiveStats
from ratewarden.server.service import DescriptorOutcome, ServiceHooks
from ratewarden.server.statsd import RATE_LIMIT, SERVICE, SHOULD_RATE_LIMIT, stats_name
from ratewarden.server.tally import LIVE_DECISIONS, OUTCOMES, Tally

__all__ = ["MAX_UNKNOWN_DOMAINS", "MULTIPROC_ENV", "OTHER", "ServiceStats", "multiprocess_dir"]

#: The ``key`` label of descriptors past ``max_keys``.
OTHER = "other"
#: Unknown domains counted by name in ``domain_not_found``; later ones are ``OTHER``.
MAX_UNKNOWN_DOMAINS = 1_000
#: prometheus_client's switch to multiprocess mode (read when it is first imported).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_PREFIX = "ratelimit_service"
_METHOD = "ShouldRateLimit"


def upstream_keys(key: str) -> tuple[str, str]:
    """``key1`` and ``key2``: the first two parts of a ``key`` label, split where
    envoyproxy/ratelimit's statsd mapping splits its stat names (``.``), after the
    same cleaning (``stats_name``); ``key2`` is empty for a one-part key."""
    parts = stats_name(key).split(".", 2)
    return parts[0], parts[1] if len(parts) > 1 else ""


def multiprocess_dir() -> str | None:
    """The directory workers share their metrics in, or None for a single process."""
    return os.environ.get(MULTIPROC_ENV) or None


class _KeyCounters(NamedTuple):
    total_hits: Any
    over_limit: Any
    near_limit: Any
    within_limit: Any
    shadow_mode: Any
    over_limit_local: Any


class _Flushing:
    """A collector with no metrics of its own: reading the registry flushes the tally."""

    def __init__(self, stats: ServiceStats) -> None:
        self._stats = stats

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        self._stats.flush()
        return []


class ServiceStats(ServiceHooks):
    """Counts what the service decides into ``registry`` (a fresh one unless given).

    The hooks add plain integers to a tally, under one lock; ``flush()`` moves the
    tally into the Prometheus counters, the dashboard's ``LiveStats`` and every sink
    in ``sinks`` (StatsD). Reading the registry (``exposition()``, or any
    ``registry.collect()``) and ``live`` flush first, so what they show is exact;
    ``ratewarden serve`` also flushes every second, so each worker's values reach
    the shared multiprocess files (and the dashboard's history) within a second.
    Counting a decision costs a dict lookup and a few additions instead of a dozen
    locked counter increments: the hooks run on every request's path.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        clock: Clock | None = None,
        max_keys: int = 10_000,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.metrics = PrometheusMetrics(self.registry)
        self._live = LiveStats(self.clock)
        #: Where each flush's per-key counts also go (``StatsdSink``): ``add(stats_key,
        #: counts)`` with the tally's indices, and ``calls(count, seconds)``.
        self.sinks: list[Any] = []
        self._max_keys = max_keys
        self._keys: set[tuple[str, str]] = set()
        self._overflow_rules: set[tuple[str, str]] = set()
        self._unknown_domains: set[str] = set()
        # Bound children of the per-key counters: at most max_keys, plus "other" per domain.
        self._counters: dict[tuple[str, str], _KeyCounters] = {}
        self._lock = threading.Lock()
        self._tally = Tally()
        # First in the registry: whoever reads it (exposition, or a caller's own
        # collect()) reads the tally flushed.
        self.registry.register(_Flushing(self))
        per_key = ("domain", "key", "key1", "key2")

        def counter(name: str, doc: str, labels: tuple[str, ...] = per_key) -> Counter:
            return Counter(f"{_PREFIX}_{name}", doc, labels, registry=self.registry)

        self.total_hits = counter("rate_limit_total_hits", "Hits asked for, per descriptor key.")
        self.over_limit = counter("rate_limit_over_limit", "Hits over the limit.")
        self.near_limit = counter(
            "rate_limit_near_limit", "Hits under the limit but above the near-limit ratio."
        )
        self.within_limit = counter("rate_limit_within_limit", "Hits under the limit.")
        self.shadow_mode = counter(
            "rate_limit_shadow_mode", "Hits over the limit, let through by shadow_mode."
        )
        self.over_limit_local = counter(
            "rate_limit_over_limit_with_local_cache",
            "Hits over the limit answered from the over-limit cache, without a store call.",
        )
        self.value_overflow = counter(
            "rate_limit_value_overflow",
            "New values past --max-values-per-rule, counted on the rule's shared overflow counter.",
            ("domain", "rule"),
        )
        self.domain_not_found = counter(
            "rate_limit_domain_not_found",
            "Descriptors of requests to a domain the config does not know (allowed).",
            ("domain",),
        )
        self.failure_allowed = counter(
            "rate_limit_failure_mode_allowed",
            "Descriptors allowed by a failure mode while the store failed.",
            ("domain", "key", "failure_mode"),
        )
        self.failure_denied = counter(
            "rate_limit_failure_mode_denied",
            "Descriptors denied by a failure mode while the store failed.",
            ("domain", "key", "failure_mode"),
        )
        self.errors = counter(
            "should_rate_limit_error",
            "Failed store calls (store_error) and failed ShouldRateLimit calls (service_error).",
            ("err_type",),
        )
        self.requests = counter(
            "total_requests", "ShouldRateLimit calls, gRPC and HTTP.", ("grpc_method",)
        )
        self._calls = self.requests.labels(_METHOD)
        self.response_time = Histogram(
            f"{_PREFIX}_response_time_seconds",
            "Time to answer one ShouldRateLimit call.",
            ("grpc_method",),
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self._response_time = self.response_time.labels(_METHOD)
        self.config_success = counter(
            "config_load_success", "Config loads that succeeded (the first and each reload).", ()
        )
        self.config_error = counter(
            "config_load_error", "Config loads that failed; the last good config stays.", ()
        )
        self.config_loaded_at = Gauge(
            f"{_PREFIX}_config_last_load_success_timestamp_seconds",
            "Unix time at which the config in use was loaded.",
            registry=self.registry,
            multiprocess_mode="max",
        )

    # --- ServiceHooks -----------------------------------------------------------------

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> None:
        self.on_decisions(domain, (outcome,))

    def on_decisions(self, domain: str, outcomes: Sequence[DescriptorOutcome]) -> None:
        full = self._tally.decisions(domain, outcomes)
        for outcome in outcomes:
            failure = outcome.failure
            if failure is not None:  # rare (the store failed): the labelled counts on the spot
                key = self._key(domain, outcome.metric_key)
                counter = self.failure_denied if outcome.over_limit else self.failure_allowed
                counter.labels(bounded(domain), key, failure).inc()
                self._live.degraded(outcome.rule.path, failure)
        if full:
            self.flush()

    def on_store_error(self, domain: str, rule: DescriptorRule, error: Exception) -> None:
        self.errors.labels("store_error").inc()
        for sink in self.sinks:
            sink.count(SHOULD_RATE_LIMIT + "redis_error")
        self.metrics.degraded(
            rule=rule.path, failure_mode=rule.failure_mode, reason=type(error).__name__
        )

    def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
        domain = bounded(domain)
        path = self._capped(self._overflow_rules, domain, bounded(rule.path))
        self.value_overflow.labels(domain, path).inc()

    def on_domain_not_found(self, domain: str, descriptors: int) -> None:
        label = bounded(domain)
        if label not in self._unknown_domains:
            with self._lock:
                if len(self._unknown_domains) < MAX_UNKNOWN_DOMAINS:
                    self._unknown_domains.add(label)
                elif label not in self._unknown_domains:
                    label = OTHER
        self.domain_not_found.labels(label).inc(descriptors)
        for sink in self.sinks:
            sink.count(f"{RATE_LIMIT}{stats_name(label)}.domain_not_found", descriptors)

    def on_store_call(self, seconds: float) -> None:
        if self._tally.store_call(seconds):
            self.flush()

    # --- the server's own events ------------------------------------------------------

    def request(self, seconds: float, *, failed: bool = False) -> None:
        """One ShouldRateLimit call answered in ``seconds``; ``failed``: by the fallback."""
        if self._tally.call(seconds, failed):
            self.flush()

    def config_load(self, ok: bool) -> None:
        """A config load finished: ``ok`` if it is now the config in use."""
        if ok:
            self.config_success.inc()
            self.config_loaded_at.set(self.clock.now())
        else:
            self.config_error.inc()
        for sink in self.sinks:
            sink.count(SERVICE + ("config_load_success" if ok else "config_load_error"))

    # --- reading ----------------------------------------------------------------------

    @property
    def live(self) -> LiveStats:
        """The dashboard's figures (``LiveStats``), with everything counted so far."""
        self.flush()
        return self._live

    def flush(self) -> None:
        """Move the tally into the registry, the dashboard's figures and the sinks."""
        taken = self._tally.take()
        for (domain, metric_key, path, algorithm), counts in taken.slots.items():
            key = self._key(domain, metric_key)
            label = bounded(domain)
            counters = self._counters.get((label, key))
            if counters is None:
                counters = self._counters[(label, key)] = self._bind(label, key)
            for index, counter in enumerate(counters):
                if counts[index]:
                    counter.inc(counts[index])
            for index, outcome in OUTCOMES:
                if counts[index]:
                    self.metrics.count(
                        rule=path, algorithm=algorithm, outcome=outcome, by=counts[index]
                    )
            self._live.add(path, counts[LIVE_DECISIONS:])
            for sink in self.sinks:
                sink.add(f"{label}.{key}", counts)
        for category, path, entries, weight in taken.top:
            self._live.top(category, path, entries, weight)
        self.metrics.store_latencies(seconds=taken.store_times)
        self._live.store_calls(taken.store_times)
        calls, failed = taken.call_times, taken.failed_calls
        if calls:
            self._calls.inc(len(calls))
            observe_many(self._response_time, calls)
            if failed:
                self.errors.labels("service_error").inc(failed)
            for sink in self.sinks:
                sink.calls(calls)
                if failed:
                    sink.count(SHOULD_RATE_LIMIT + "service_error", failed)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the format the ``Accept`` header asks for, and its content type.

        The Prometheus text format (0.0.4) unless ``accept`` asks for OpenMetrics
        or a newer text format (prometheus_client's ``choose_encoder``). In
        multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set), every worker's
        values summed (the timestamp gauge: the latest): this worker's exact, the
        others' as of their last flush (at most a second ago).
        """
        self.flush()
        registry = self.registry
        shared = multiprocess_dir()
        if shared is not None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=shared)  # type: ignore[no-untyped-call]
        encoder, content_type = choose_encoder(accept)
        body: bytes = encoder(registry)
        return body, content_type

    def _bind(self, domain: str, key: str) -> _KeyCounters:
        """The six per-key counters bound to their labels once (``labels()`` is costly)."""
        key1, key2 = upstream_keys(key)
        return _KeyCounters(
            *(
                counter.labels(domain, key, key1, key2)
                for counter in (
                    self.total_hits,
                    self.over_limit,
                    self.near_limit,
                    self.within_limit,
                    self.shadow_mode,
                    self.over_limit_local,
                )
            )
        )

    def _key(self, domain: str, metric_key: str) -> str:
        """The ``key`` label: the metric key without its domain, bounded, capped by count."""
        key = bounded(metric_key.removeprefix(domain + "."))
        return self._capped(self._keys, bounded(domain), key)

    def _capped(self, seen: set[tuple[str, str]], domain: str, label: str) -> str:
        """``label``, or ``OTHER`` once ``seen`` holds ``max_keys`` other pairs."""
        if (domain, label) in seen:
            return label
        with self._lock:
            if (domain, label) not in seen:
                if len(seen) >= self._max_keys:
                    return OTHER
                seen.add((domain, label))
        return label

    def __repr__(self) -> str:
        return f"ServiceStats(registry={self.registry!r})"
