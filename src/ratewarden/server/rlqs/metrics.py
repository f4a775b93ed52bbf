"""The quota service's Prometheus metrics, read from ``QuotaService`` at each scrape.

A collector on ``ServiceStats.registry`` (``GET /metrics``), registered by the
composition root with ``--rlqs``. Labels are bounded by the config: ``rule`` is a
rule's path (``domain.key_value...``), ``none`` for buckets without a rule; no
bucket value or domain name a caller sends becomes a label, except in the per-bucket
families, which are off by default (below).

==============================================  ========================================
ratewarden_rlqs_streams                         open StreamRateLimitQuotas streams
ratewarden_rlqs_buckets                         buckets tracked (every domain)
ratewarden_rlqs_reports_total                   usage reports taken
ratewarden_rlqs_rounds_total                    share rounds run
ratewarden_rlqs_unknown_buckets_total           buckets that matched no rule (ALLOW_ALL)
ratewarden_rlqs_abandoned_total                 abandon_actions sent (rule removed, idle)
ratewarden_rlqs_would_deny_total                requests shadow rules' Envoys admitted
                                                beyond their shares (estimate)
ratewarden_rlqs_held_back_total                 share changes the budget of changes held
                                                back (--rlqs-change-rounds)
ratewarden_rlqs_reported_requests_total         {rule, outcome}: requests Envoys reported
                                                allowed or denied
ratewarden_rlqs_assigned_streams                {rule}: streams holding a token bucket
ratewarden_rlqs_assigned_tokens_per_fill        {rule}: their tokens per fill, summed
ratewarden_rlqs_bucket_demand                   {domain, bucket, rule}: requests a second
                                                the bucket's Envoys ask, summed
ratewarden_rlqs_bucket_assigned                 {domain, bucket, rule}: tokens a second
                                                assigned to them as token buckets
ratewarden_rlqs_bucket_streams                  {domain, bucket, rule}: streams holding it
ratewarden_rlqs_bucket_reported_requests_total  {domain, bucket, rule, outcome}: requests
                                                its Envoys reported since it is tracked
==============================================  ========================================

The ``bucket_*`` families are per bucket, and bucket ids are request values (an API
key, a user id) while ``/metrics`` is open to every client of the HTTP port, so they are
off unless asked for: ``buckets`` (``--rlqs-bucket-metrics N``) gives series to the
``N`` buckets with the highest demand at the scrape (``figures.top``), and the gauges
one more, ``bucket="other"`` (``domain`` and ``rule`` empty), summing the rest. The
reported counters have no ``other``: a bucket moving in or out of the top would make
it go down. A bucket's series starts and stops as it enters and leaves the top; the
per-rule families above count every bucket. Labels are bounded
(``ratewarden.labels.bounded``); ``bucket`` is ``figures.bucket_label``, escaped so that two
bucket ids never share a series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ratewarden.labels import bounded
from ratewarden.server.rlqs.figures import top
from ratewarden.server.rlqs.quota import QuotaService

__all__ = ["QuotaCollector"]

_PREFIX = "ratewarden_rlqs"


class QuotaCollector:
    """Reads ``quota`` when the registry is collected; holds no values of its own."""

    def __init__(self, quota: QuotaService, *, buckets: int = 0) -> None:
        self._quota = quota
        self._buckets = buckets

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
            ("held_back", stats.held_back, "share changes held back by the budget of changes"),
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
        if self._buckets > 0:
            yield from self._per_bucket()

    def _per_bucket(self) -> Iterator[Any]:
        shown, rest = top(self._quota.figures(), self._buckets)
        labels = ("domain", "bucket", "rule")
        demand = GaugeMetricFamily(
            f"{_PREFIX}_bucket_demand", "requests a second the bucket's Envoys ask", labels=labels
        )
        assigned = GaugeMetricFamily(
            f"{_PREFIX}_bucket_assigned", "tokens a second assigned as token buckets", labels=labels
        )
        streams = GaugeMetricFamily(
            f"{_PREFIX}_bucket_streams", "streams holding the bucket", labels=labels
        )
        reported = CounterMetricFamily(
            f"{_PREFIX}_bucket_reported_requests",
            "requests the bucket's Envoys reported since it is tracked",
            labels=(*labels, "outcome"),
        )
        for figures in shown:
            names = (bounded(figures.domain), figures.label, figures.rule or "none")
            demand.add_metric(names, figures.demand)
            assigned.add_metric(names, figures.assigned)
            streams.add_metric(names, figures.streams)
            reported.add_metric((*names, "allowed"), figures.allowed)
            reported.add_metric((*names, "denied"), figures.denied)
        if rest.buckets:
            demand.add_metric(("", "other", ""), rest.demand)
            assigned.add_metric(("", "other", ""), rest.assigned)
            streams.add_metric(("", "other", ""), rest.streams)
        yield from (demand, assigned, streams, reported)
