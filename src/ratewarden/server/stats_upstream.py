"""envoyproxy/ratelimit's stats as Prometheus metrics, by the names upstream's default
mapping gives them: ``BuiltinMetrics``, the first of ``ServiceStats.sinks``.

It takes the events every sink takes (``statsd.StatsEvents``) and keeps them in counters
and a histogram of ``ServiceStats.registry`` (the table of names is ``stats``'s). With
``--metrics-mapping`` a file of the operator's names them instead
(``stats_mapped.MappedMetrics``), and these are not made.

``response_time_ms`` is upstream's ``PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS``: the
``ratelimit_service_response_time_seconds`` histogram then holds milliseconds, as
upstream's default mapping held them before it scaled them to seconds.

``upstream_names`` (``--metrics-upstream-names``, upstream's ``USE_PROMETHEUS=true``) exposes
them as upstream's registry does, so that its queries and alerts find them:

- a counter's samples by the bare name (``ratelimit_service_rate_limit_total_hits``), as
  client_golang writes statsd_exporter's counters. prometheus_client writes a counter family's
  samples as ``NAME_total`` in both of its formats (and its ``# TYPE`` line as ``NAME_total``
  in the text one), so these are gauges that only go up (``multiprocess_mode="sum"``: every
  worker's added up, as a counter's are): ``# TYPE ... gauge`` where upstream writes
  ``counter``, which PromQL's ``rate`` and ``increase`` do not read;
- a store failure as ``should_rate_limit_error{err_type="redis_error"}``, once a call whatever
  its descriptors (``store_failed_call``), as upstream's service counts it; not
  ``store_error`` once a descriptor, ratewarden's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ratewarden.histograms import observe_many
from ratewarden.metrics import LATENCY_BUCKETS
from ratewarden.server.statsd import stats_name

__all__ = ["PREFIX", "BuiltinMetrics", "upstream_keys"]

PREFIX = "ratelimit_service"
_METHOD = "ShouldRateLimit"


def upstream_keys(key: str) -> tuple[str, str]:
    """``key1`` and ``key2``: the first two parts of a ``key`` label, split where
    envoyproxy/ratelimit's statsd mapping splits its stat names (``.``), after the
    same cleaning (``stats_name``); ``key2`` is empty for a one-part key."""
    parts = stats_name(key).split(".", 2)
    return parts[0], parts[1] if len(parts) > 1 else ""


class _KeyCounters(NamedTuple):
    total_hits: Any
    over_limit: Any
    near_limit: Any
    within_limit: Any
    shadow_mode: Any
    over_limit_local: Any


class BuiltinMetrics:
    """Upstream's stats in ``registry``, by the default mapping's names."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        response_time_ms: bool = False,
        upstream_names: bool = False,
    ) -> None:
        self._scale = 1000.0 if response_time_ms else 1.0
        self._upstream_names = upstream_names
        per_key = ("domain", "key", "key1", "key2")

        def counter(name: str, doc: str, labels: tuple[str, ...] = per_key) -> Any:
            if upstream_names:  # the bare name: see the module's docstring
                return Gauge(
                    f"{PREFIX}_{name}", doc, labels, registry=registry, multiprocess_mode="sum"
                )
            return Counter(f"{PREFIX}_{name}", doc, labels, registry=registry)

        self._per_key = (
            counter("rate_limit_total_hits", "Hits asked for, per descriptor key."),
            counter("rate_limit_over_limit", "Hits over the limit."),
            counter(
                "rate_limit_near_limit", "Hits under the limit but above the near-limit ratio."
            ),
            counter("rate_limit_within_limit", "Hits under the limit."),
            counter("rate_limit_shadow_mode", "Hits over the limit, let through by shadow_mode."),
            counter(
                "rate_limit_over_limit_with_local_cache",
                "Hits over the limit answered from the over-limit cache, without a store call.",
            ),
        )
        self._counters: dict[tuple[str, str], _KeyCounters] = {}
        self._domain_not_found = counter(
            "rate_limit_domain_not_found",
            "Descriptors of requests to a domain the config does not know (allowed).",
            ("domain",),
        )
        self._errors = counter(
            "should_rate_limit_error",
            f"{'Calls' if upstream_names else 'Descriptors'} a failed store call (or the "
            "open breaker) left to a failure mode "
            f"({'redis_error' if upstream_names else 'store_error'}), failed ShouldRateLimit "
            "calls (service_error), and calls the client cancelled (cancelled: its deadline, "
            "Envoy's timeout).",
            ("err_type",),
        )
        requests = counter(
            "total_requests", "ShouldRateLimit calls, gRPC and HTTP.", ("grpc_method",)
        )
        self._calls = requests.labels(_METHOD)
        unit = "milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)" if response_time_ms else ""
        self._response_time = Histogram(
            f"{PREFIX}_response_time_seconds",
            f"Time to answer one ShouldRateLimit call{', in ' + unit if unit else ''}.",
            ("grpc_method",),
            registry=registry,
            buckets=LATENCY_BUCKETS,
        ).labels(_METHOD)
        self._config_success = counter(
            "config_load_success", "Config loads that succeeded (the first and each reload).", ()
        )
        self._config_error = counter(
            "config_load_error", "Config loads that failed; the last good config stays.", ()
        )

    def key_counts(self, domain: str, key: str, counts: Sequence[int]) -> None:
        counters = self._counters.get((domain, key))
        if counters is None:  # the six children bound to their labels once (labels() is costly)
            key1, key2 = upstream_keys(key)
            counters = self._counters[(domain, key)] = _KeyCounters(
                *(counter.labels(domain, key, key1, key2) for counter in self._per_key)
            )
        for index, counter in enumerate(counters):
            if counts[index]:
                counter.inc(counts[index])

    def calls(self, seconds: Sequence[float], failed: int = 0, cancelled: int = 0) -> None:
        self._calls.inc(len(seconds))
        scale = self._scale
        observe_many(self._response_time, seconds if scale == 1.0 else [s * scale for s in seconds])
        if failed:
            self._errors.labels("service_error").inc(failed)
        if cancelled:
            self._errors.labels("cancelled").inc(cancelled)

    def store_error(self) -> None:
        """A descriptor a store failure left to its failure mode: ``store_error``, unless
        ``upstream_names`` (then ``store_failed_call`` counts the call)."""
        if not self._upstream_names:
            self._errors.labels("store_error").inc()

    def store_failed_call(self) -> None:
        """A call a store failure reached: upstream's ``redis_error`` with ``upstream_names``."""
        if self._upstream_names:
            self._errors.labels("redis_error").inc()

    def domain_not_found(self, domain: str, descriptors: int) -> None:
        self._domain_not_found.labels(domain).inc(descriptors)

    def config_load(self, ok: bool) -> None:
        (self._config_success if ok else self._config_error).inc()

    def __repr__(self) -> str:
        return "BuiltinMetrics()"
