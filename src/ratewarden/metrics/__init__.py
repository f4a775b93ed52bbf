"""Instrumentation hooks, a Prometheus backend, and a rate limiter for log lines.

Code that makes decisions takes a ``Metrics`` and calls its hooks; the
base class does nothing, so instrumentation costs a method call when it is off.
``PrometheusMetrics`` records the hooks as Prometheus counters, gauges and a
histogram; ``prometheus_client`` is imported when one is built, never when this
package is imported, so the core has no hard dependency on it.

Label values are rule names, algorithm names, failure modes, outcomes from fixed
sets and breaker states: never raw keys. A rule label past ``max_rules`` distinct
values is recorded as ``"other"`` so that a misconfigured caller cannot grow the
registry without bound. Every label value is also cut to ``MAX_LABEL_CHARS`` (128)
characters, a longer one ending in ``…`` and a hash of the whole
(``ratewarden.labels.bounded``): a rule named after a request value cannot make
the series long either.

``LogRateLimiter`` keeps a storm of identical failures (a Redis outage seen by
every request) to one log line per key per interval, and counts what it held back.

The modules: ``_hooks`` (``Metrics``, ``NO_METRICS``, ``optional_hook``),
``prometheus`` (``PrometheusMetrics``, ``LATENCY_BUCKETS``), ``_log``
(``LogRateLimiter``).
"""

from __future__ import annotations

from ratewarden.metrics._hooks import NO_METRICS, Metrics, optional_hook
from ratewarden.metrics._log import LogRateLimiter
from ratewarden.metrics.prometheus import LATENCY_BUCKETS, PrometheusMetrics

__all__ = [
    "LATENCY_BUCKETS",
    "NO_METRICS",
    "LogRateLimiter",
    "Metrics",
    "PrometheusMetrics",
    "optional_hook",
]
