"""What the quota service sends an Envoy: an ``Action`` per stream and bucket.

``QuotaService`` (``quota.py``) returns them, the stream handler (``grpc.py``) turns them
into ``RateLimitQuotaResponse``s: an assignment (a ``Share`` as a token bucket, or a
blanket rule) with its time to live, or an abandon.
"""

from __future__ import annotations

from dataclasses import dataclass

from ratewarden.server.rlqs.reports import BucketKey
from ratewarden.server.rlqs.shares import Share

__all__ = ["ALLOW_ALL", "DENY_ALL", "Action"]

ALLOW_ALL = "allow_all"
DENY_ALL = "deny_all"


@dataclass(frozen=True, slots=True)
class Action:
    """Send ``stream`` an assignment for ``bucket`` (a ``Share`` refilled every ``fill_s``
    seconds, ``ALLOW_ALL`` or ``DENY_ALL``; for ``ttl_s`` seconds) or, when ``assignment``
    is None, an abandon."""

    stream: int
    bucket: BucketKey
    assignment: Share | str | None
    ttl_s: int = 0
    fill_s: int = 0
