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
                                                          descriptor a failed store call, or
                                                          the open circuit breaker, left to
                                                          its failure mode), service_error,
                                                          cancelled (calls the client gave up
                                                          on: its deadline, Envoy's timeout)
ratelimit_service_total_requests_total                    {grpc_method}: ShouldRateLimit calls,
                                                          cancelled ones too
ratelimit_service_response_time_seconds                   histogram of ShouldRateLimit calls
                                                          (a cancelled one: until it was)
ratelimit_service_config_load_success_total               config loads that succeeded
ratelimit_service_config_load_error_total                 config loads that failed
ratelimit_service_config_last_load_success_timestamp_seconds  when the config in use loaded
ratelimit_service_config_last_load_failed                 1 while the latest load failed
========================================================  ==================================

The rows from ``total_hits`` to ``config_load_error`` are upstream's stats, kept by the first
of ``ServiceStats.sinks`` (``stats_upstream.BuiltinMetrics``); with ``--metrics-mapping`` a
statsd_exporter mapping file names them instead (``stats_mapped.MappedMetrics``). The others
are ratewarden's own and stay as they are, and so do,
through ``ratewarden.metrics.PrometheusMetrics`` on the same registry,
``ratewarden_decisions_total{rule, algorithm, outcome}``, ``ratewarden_degraded_total{rule,
failure_mode, reason}`` and ``ratewarden_store_latency_seconds`` (not its middleware
and region families, ``NOT_SERVED``: nothing in serve feeds them). Its own
``ratewarden_client_san_refused_total`` counts the gRPC calls ``--tls-client-san`` refused.

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
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from ratewarden.clock import Clock, SystemClock
from ratewarden.labels import bounded
from ratewarden.limiter import failure_reason
from ratewarden.metrics import PrometheusMetrics
from ratewarden.server.config import DescriptorRule
from ratewarden.server.dashboard.live import LiveStats
from ratewarden.server.service import DescriptorOutcome, ServiceHooks
from ratewarden.server.stats_mapped import MappedMetrics
from ratewarden.server.stats_mapped_shared import SharedMapped
from ratewarden.server.stats_upstream import PREFIX, BuiltinMetrics
from ratewarden.server.statsd_mapping import StatsdMapping
from ratewarden.server.tally import LIVE_DECISIONS, OUTCOMES, Tally
from ratewarden.server.tls_metrics import TlsMetrics

__all__ = ["MAX_UNKNOWN_DOMAINS", "MULTIPROC_ENV", "OTHER", "ServiceStats", "multiprocess_dir"]

#: The ``key`` label of descriptors past ``max_keys``.
OTHER = "other"
#: Unknown domains counted by name in ``domain_not_found``; later ones are ``OTHER``.
MAX_UNKNOWN_DOMAINS = 1_000
#: prometheus_client's switch to multiprocess mode (read when it is first imported).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The directory workers share their metrics in, or None for a single process."""
    return os.environ.get(MULTIPROC_ENV) or None


class _Flushing:
    """A collector with no metrics of its own: reading the registry flushes the tally."""

    def __init__(self, stats: ServiceStats) -> None:
        self._stats = stats

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        self._stats.flush()
        return []


#: ``PrometheusMetrics`` families that only the library's middleware and region budgets
#: feed: serve never counts them, so it leaves them out of its registry (not empty families).
NOT_SERVED = frozenset(
    {
        "ratewarden_shed_decisions",
        "ratewarden_region_overshoot_requests",
        "ratewarden_slots",
        "ratewarden_budget_reservations",
        "ratewarden_budget_tokens",
        "ratewarden_idempotency_requests",
    }
)


class _ServedOnly:
    """The registry as ``PrometheusMetrics`` sees it: its collectors but ``NOT_SERVED``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def register(self, collector: Any) -> None:
        if not any(family.name in NOT_SERVED for family in collector.describe()):
            self._registry.register(collector)

    def unregister(self, collector: Any) -> None:
        self._registry.unregister(collector)


class ServiceStats(ServiceHooks):
    """Counts what the service decides into ``registry`` (a fresh one unless given).

    The hooks add plain integers to a tally, under one lock; ``flush()`` moves the
    tally into the Prometheus counters, the dashboard's ``LiveStats`` and every sink
    in ``sinks`` (upstream's stats in the registry, then StatsD and DogStatsD).
    Reading the registry (``exposition()``, or any ``registry.collect()``) and ``live``
    flush first, so what they show is exact; ``ratewarden serve`` also flushes every
    second, so each worker's values reach the shared multiprocess files (and the
    dashboard's history) within a second.
    Counting a decision costs a dict lookup and a few additions instead of a dozen
    locked counter increments: the hooks run on every request's path.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        clock: Clock | None = None,
        max_keys: int = 10_000,
        mapping: StatsdMapping | None = None,
        response_time_ms: bool = False,
        upstream_names: bool = False,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self.registry = registry if registry is not None else CollectorRegistry()
        # First in the registry: whoever reads it (exposition, or a caller's own
        # collect()) reads the tally flushed.
        self.registry.register(_Flushing(self))
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.metrics = PrometheusMetrics(_ServedOnly(self.registry))
        self._live = LiveStats(self.clock)
        #: Where each flush's counts go (``statsd.StatsEvents``'s six events): upstream's
        #: stats in the registry by the default mapping's names (``BuiltinMetrics``) or by
        #: ``mapping``'s (``MappedMetrics``), then StatsD and DogStatsD (``app`` adds them).
        upstream: Any
        if mapping is None:
            upstream = BuiltinMetrics(
                self.registry, response_time_ms=response_time_ms, upstream_names=upstream_names
            )
        else:
            upstream = MappedMetrics(
                mapping, self.registry, clock=self.clock, upstream_names=upstream_names
            )
        self.sinks: list[Any] = [upstream]
        self._max_keys = max_keys
        self._keys: set[tuple[str, str]] = set()
        self._overflow_rules: set[tuple[str, str]] = set()
        self._unknown_domains: set[str] = set()
        self._lock = threading.Lock()
        self._tally = Tally()
        per_key = ("domain", "key")

        def counter(name: str, doc: str, labels: tuple[str, ...] = per_key) -> Counter:
            return Counter(f"{PREFIX}_{name}", doc, labels, registry=self.registry)

        self.value_overflow = counter(
            "rate_limit_value_overflow",
            "New values past --max-values-per-rule, counted on the rule's shared overflow counter.",
            ("domain", "rule"),
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
        #: serve's ``on_refused`` for ``grpc_san.ClientSanCheck``: calls refused UNAUTHENTICATED.
        self.client_san_refused = Counter(
            "ratewarden_client_san_refused",
            "gRPC calls refused because the client certificate does not name --tls-client-san.",
            registry=self.registry,
        )
        #: The gRPC port's certificate: its expiry and renewals (``tls_metrics``).
        self.tls = TlsMetrics(self.registry)
        self.config_loaded_at = Gauge(
            f"{PREFIX}_config_last_load_success_timestamp_seconds",
            "Unix time at which the config in use was loaded.",
            registry=self.registry,
            multiprocess_mode="max",
        )
        #: 1 from a failed load to the next good one: unlike the error counter, it stays up
        #: while the rule files (or the xDS server's rules) keep failing.
        self.config_load_failed = Gauge(
            f"{PREFIX}_config_last_load_failed",
            "1 while the latest config load failed (the last good config serves), else 0.",
            registry=self.registry,
            multiprocess_mode="livemax",
        )

    # --- ServiceHooks -----------------------------------------------------------------

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> None:
        self.on_decisions(domain, (outcome,))

    def on_decisions(self, domain: str, outcomes: Sequence[DescriptorOutcome]) -> None:
        full = self._tally.decisions(domain, outcomes)
        failed = False
        for outcome in outcomes:
            failure = outcome.failure
            if failure is not None:  # rare (the store failed): the labelled counts on the spot
                failed = True
                key = self._key(domain, outcome.metric_key)
                counter = self.failure_denied if outcome.over_limit else self.failure_allowed
                counter.labels(bounded(domain), key, failure).inc()
                self._live.degraded(outcome.rule.path, failure)
        if failed:  # upstream's redis_error: once a call, whatever its descriptors
            for sink in self.sinks:
                sink.store_failed_call()
        if full:
            self.flush()

    def on_store_error(self, domain: str, rule: DescriptorRule, error: Exception) -> None:
        for sink in self.sinks:
            sink.store_error()
        # ``breaker_open`` when the open breaker answered, as the library reports it.
        self.metrics.degraded(
            rule=rule.path, failure_mode=rule.failure_mode, reason=failure_reason(error)
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
        for sink in self.sinks:
            sink.domain_not_found(label, descriptors)

    def on_store_call(self, seconds: float) -> None:
        if self._tally.store_call(seconds):
            self.flush()

    # --- the server's own events ------------------------------------------------------

    def request(self, seconds: float, *, failed: bool = False, cancelled: bool = False) -> None:
        """One ShouldRateLimit call answered in ``seconds``; ``failed``: by the fallback;
        ``cancelled``: never answered, the client gave up (its deadline, Envoy's ``timeout``)
        after ``seconds``. A cancelled call's store step may have been sent already: Redis
        then counts its hits, which no decision metric shows (docs/reliability.md)."""
        if self._tally.call(seconds, failed, cancelled):
            self.flush()

    def config_load(self, ok: bool) -> None:
        """A config load finished: ``ok`` if it is now the config in use."""
        if ok:
            self.config_loaded_at.set(self.clock.now())
        self.config_load_failed.set(0 if ok else 1)
        for sink in self.sinks:
            sink.config_load(ok)

    # --- reading ----------------------------------------------------------------------

    @property
    def mapped(self) -> MappedMetrics | None:
        """Upstream's stats named by ``--metrics-mapping``, if a file is given."""
        upstream = self.sinks[0]
        return upstream if isinstance(upstream, MappedMetrics) else None

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
            for sink in self.sinks:
                sink.key_counts(label, key, counts)
            for index, outcome in OUTCOMES:
                if counts[index]:
                    self.metrics.count(
                        rule=path, algorithm=algorithm, outcome=outcome, by=counts[index]
                    )
            self._live.add(path, counts[LIVE_DECISIONS:])
        for category, path, entries, weight in taken.top:
            self._live.top(category, path, entries, weight)
        self.metrics.store_latencies(seconds=taken.store_times)
        self._live.store_calls(taken.store_times)
        calls, failed, cancelled = taken.call_times, taken.failed_calls, taken.cancelled_calls
        if calls:
            for sink in self.sinks:
                sink.calls(calls, failed, cancelled)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the format the ``Accept`` header asks for, and its content type.

        The Prometheus text format (0.0.4) unless ``accept`` asks for OpenMetrics
        or a newer text format (prometheus_client's ``choose_encoder``). In
        multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set), every worker's
        values summed (the timestamp gauge: the latest): this worker's exact, the
        others' as of their last flush (at most a second ago); with a mapping file,
        its ``ttl`` and summary quantiles over every worker (``stats_mapped_shared``).
        """
        self.flush()
        registry = self.registry
        shared = multiprocess_dir()
        if shared is not None:
            registry = CollectorRegistry()
            files = MultiProcessCollector(None, path=shared)  # type: ignore[no-untyped-call]
            mapped = self.mapped
            if mapped is None:
                registry.register(files)
            else:  # the mapping's ttl and summary quantiles, over every worker
                registry.register(SharedMapped(files, mapped, shared, self.clock))
        encoder, content_type = choose_encoder(accept)
        body: bytes = encoder(registry)
        return body, content_type

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
