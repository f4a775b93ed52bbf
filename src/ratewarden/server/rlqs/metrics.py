"""The quota service's Prometheus metrics, read from ``QuotaService`` at each scrape.

A collector on ``ServiceStats.registry`` (``GET /metrics``), registered by the
composition root with ``--rlqs``. Labels are bounded by the config: ``rule`` is a
rule's path (``domain.key_value...``), ``none`` for buckets without a rule; no
bucket value or domain name a caller sends becomes a label.

==============================================  ========================================
ratewarden_rlqs_streams                         open StreamRateLimitQuotas streams
ratewarden_rlqs_buckets                         buckets tracked (every domain)
ratewarden_rlqs_reports_total                   usage reports taken
ratewarden_rlqs_rounds_total                    share rounds run
ratewarden_rlqs_unknown_buckets_total           buckets that matched no rule (ALLOW_ALL)
ratewarden_rlqs_abandoned_total                 abandon_actions sent (rule removed, idle)
ratewarden_rlqs_would_deny_total                requests shadow rules' Envoys admitted
                                                beyond their shares (estimate)
ratewarden_rlqs_reported_requests_total         {rule, outcome}: requests Envoys reported
                                                allowed or denied
ratewarden_rlqs_assigned_streams                {rule}: streams holding a token bucket
ratewarden_rlqs_assigned_tokens_per_fill        {rule}: their tokens per fill, summed
==============================================  ========================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ratewarden.server.rlqs.quota import QuotaService

__all__ = ["QuotaCollector"]

_PREFIX = "ratewarden_rlqs"


class QuotaCollector:
    """Reads ``quota`` when the registry is collected; holds no values of its own."""

    def __init__(self, quota: QuotaService) -> None:
        self._quota = quota

    def describe(self) -> list[Any]:
        return list(self.collect())

    def collect(self) -> Iterator[Any]:
        quota, stats = self._quota, self._quota.stats
        yield GaugeMetricFamily(f"{_PREFIX}_streams", "open quota streams", quota.streams)
        yield GaugeMetricFamily(f"{_PREFIX}_buckets", "quota buckets tracked", quota.buckets)
        for name, value, doc in (
            ("reports", stats.reports, "usage reports taken"),
            ("rounds", stats.rounds, "share rounds run"),
            ("unknown_buckets", stats.unknown_buckets, "buckets that matched no rule"),
            ("abandoned", stats.abandoned, "abandon actions sent"),
            ("would_deny", stats.would_deny, "shadow rules' admissions beyond their shares"),
        ):
            yield CounterMetricFamily(f"{_PREFIX}_{name}", doc, value)
        reported = CounterMetricFamily(
            f"{_PREFIX}_reported_requests",
            "requests Envoys reported, by rule and outcome",
            labels=("rule", "outcome"),
        )
        for (rule, outcome), count in sorted(quota.reported.items()):
            reported.add_metric((rule, outcome), count)
        yield reported
        streams = GaugeMetricFamily(
            f"{_PREFIX}_assigned_streams", "streams holding a token bucket", labels=("rule",)
        )
        tokens = GaugeMetricFamily(
            f"{_PREFIX}_assigned_tokens_per_fill",
            "tokens per fill assigned, summed over streams",
            labels=("rule",),
        )
        for rule, (holders, assigned) in sorted(quota.held().items()):
            streams.add_metric((rule,), holders)
            tokens.add_metric((rule,), assigned)
        yield streams
        yield tokens
