"""A stream's usage report, checked whole before any of it is applied.

``QuotaService.report`` takes a report's ``Usage``s only after ``check_report`` passed
them; a refused report raises ``ReportError`` naming the reason (the stream handler ends
the stream with ``INVALID_ARGUMENT``) and changes nothing. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass

from ratewarden.errors import ConfigurationError

__all__ = ["MAX_BUCKETS", "MAX_COUNT", "BucketKey", "ReportError", "Usage", "bucket_key",
           "check_report"]  # fmt: skip

BucketKey = tuple[tuple[str, str], ...]
#: Most requests one report may count for one bucket: more is not a real Envoy's count.
MAX_COUNT = 10**12
#: Most buckets the service tracks at once (every stream together).
MAX_BUCKETS = 100_000


class ReportError(ConfigurationError):
    """A usage report the service refuses; nothing of it was applied."""


@dataclass(frozen=True, slots=True)
class Usage:
    """One bucket's counts in one report."""

    bucket: BucketKey
    allowed: int
    denied: int


def bucket_key(bucket: Mapping[str, str]) -> BucketKey:
    """The service's key of a ``BucketId`` map: its items in key order (the map has none)."""
    return tuple(sorted(bucket.items()))


def check_report(
    known: str,
    domain: str,
    usages: Iterable[Usage],
    tracked: Container[tuple[str, BucketKey]],
    count: int,
) -> str:
    """The report's domain, given the stream's ``known`` one ("" before its first report),
    the buckets ``tracked`` and their ``count``; raises ``ReportError`` when it is refused."""
    if not domain and not known:
        raise ReportError(
            "RateLimitQuotaUsageReports.domain is empty in the stream's first report; "
            "Envoy sets it from the rate_limit_quota filter's domain"
        )
    if domain and known and domain != known:
        raise ReportError(
            f"RateLimitQuotaUsageReports.domain {domain!r} differs from the stream's "
            f"{known!r}; open a new stream for another domain"
        )
    domain = domain or known
    fresh = 0
    named: set[BucketKey] = set()
    for usage in usages:
        if not usage.bucket:
            raise ReportError("a bucket_quota_usages entry has an empty bucket_id")
        if any(not key or not value for key, value in usage.bucket):
            raise ReportError(f"bucket_id {dict(usage.bucket)!r} has an empty key or value")
        if usage.bucket in named:
            # Envoy reports each bucket once; adding the entries would pass MAX_COUNT.
            raise ReportError(
                f"bucket_id {dict(usage.bucket)!r} is named twice in one report; "
                "report each bucket once, its counts summed"
            )
        named.add(usage.bucket)
        if usage.allowed + usage.denied > MAX_COUNT:
            raise ReportError(
                f"bucket_id {dict(usage.bucket)!r} reports "
                f"{usage.allowed + usage.denied} requests in one report (most: {MAX_COUNT})"
            )
        fresh += (domain, usage.bucket) not in tracked
    if count + fresh > MAX_BUCKETS:
        raise ReportError(f"more than {MAX_BUCKETS} quota buckets at once; refused")
    return domain
