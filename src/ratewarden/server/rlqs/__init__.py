"""Envoy's Rate Limit Quota Service (RLQS): global limits that Envoy enforces locally.

Each Envoy keeps one stream open, reports per bucket what it allowed and denied,
and receives token-bucket assignments it enforces until their time to live runs
out. docs/rlqs.md is the guide (the bound on what the fleet admits, the Envoy
config, what is not built yet). The part, one concept a module:

- ``shares``: the share arithmetic, pure: a rule's limit split between Envoys;
- ``buckets``: a ``BucketId`` matched against a domain's descriptors, a rule's budget;
- ``reports``: a usage report, checked whole (``Usage``, ``ReportError``);
- ``members``: a bucket and its members, a member's demand;
- ``refill``: what an Envoy's bucket holds at least, so that an abandon does not refill it;
- ``fleet``: ``Fleet``, a bucket's shares through the store, for several replicas;
- ``actions``: ``Action``, what is sent an Envoy (an assignment or an abandon);
- ``quota``: ``QuotaService``, streams, buckets and rounds, sans-I/O on a clock;
- ``handover``: the graceful stop, assignments expired at once and shares released;
- ``grpc``: ``RateLimitQuotaServicer``, the stream over grpcio;
- ``figures``: per-bucket figures and the top buckets by demand, for operators;
- ``metrics``: ``QuotaCollector``, its Prometheus metrics.
"""

from __future__ import annotations

from ratewarden.server.rlqs.buckets import bucket_entries, bucket_rule, rule_budget
from ratewarden.server.rlqs.fleet import Fleet
from ratewarden.server.rlqs.grpc import RATE_LIMIT_QUOTA_SERVICE, RateLimitQuotaServicer
from ratewarden.server.rlqs.metrics import QuotaCollector
from ratewarden.server.rlqs.quota import (
    ALLOW_ALL,
    DENY_ALL,
    Action,
    QuotaService,
    QuotaStats,
)
from ratewarden.server.rlqs.reports import ReportError, Usage, bucket_key
from ratewarden.server.rlqs.shares import Budget, Share, apportion, split

__all__ = [
    "ALLOW_ALL",
    "DENY_ALL",
    "RATE_LIMIT_QUOTA_SERVICE",
    "Action",
    "Budget",
    "Fleet",
    "QuotaCollector",
    "QuotaService",
    "QuotaStats",
    "RateLimitQuotaServicer",
    "ReportError",
    "Share",
    "Usage",
    "apportion",
    "bucket_entries",
    "bucket_key",
    "bucket_rule",
    "rule_budget",
    "split",
]
