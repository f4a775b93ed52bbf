"""The quota service ``ratewarden serve --rlqs`` runs, made from its settings.

``servicer`` is called by the composition root (``server/app.py``), which says where the
shares live: in this process on the memory store (``prefix`` None), or in the store,
through ``Fleet`` over the service's limiter, for several replicas (``prefix``: the
store's key prefix). Its metrics go to the service's registry. An ``--rlqs-idle`` below
Envoy's pace of reports is logged at start (``rlqs_idle_short``), not refused: a client
of its own may report faster than Envoy does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ratewarden.clock import SystemClock
from ratewarden.limiter import AsyncLimiter
from ratewarden.server.rlqs.fleet import Fleet
from ratewarden.server.rlqs.grpc import RateLimitQuotaServicer
from ratewarden.server.rlqs.metrics import QuotaCollector
from ratewarden.server.rlqs.quota import QuotaService

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ratewarden.server.config import RateLimitConfig
    from ratewarden.server.settings import Settings

__all__ = ["ENVOY_REPORT_S", "servicer"]

log = logging.getLogger("ratewarden.server.rlqs")

#: Seconds between two usage reports of an Envoy (1.40 reports every 5 s, whatever its
#: ``reporting_interval`` says).
ENVOY_REPORT_S = 5.0


def servicer(
    settings: Settings,
    config: RateLimitConfig,
    limiter: AsyncLimiter,
    registry: CollectorRegistry,
    prefix: str | None,
) -> RateLimitQuotaServicer:
    """The ``--rlqs`` stream handler over a new ``QuotaService``, its collector registered."""
    if settings.rlqs_idle < ENVOY_REPORT_S:
        log.warning(
            "--rlqs-idle %g is below Envoy's %g s between reports: a busy bucket is abandoned "
            "after every report, and requests it admitted since its last report are not counted "
            "against the bucket it comes back to; give %g or more",
            settings.rlqs_idle, ENVOY_REPORT_S, 2 * ENVOY_REPORT_S,
            extra={"event": "rlqs_idle_short", "rlqs_idle": settings.rlqs_idle},
        )  # fmt: skip
    fleet = None if prefix is None else Fleet(limiter, prefix=prefix)
    quota = QuotaService(
        config,
        clock=SystemClock(),
        interval=settings.rlqs_interval,
        ttl_s=settings.rlqs_ttl,
        shadow=settings.shadow,
        fleet=fleet,
        idle_s=settings.rlqs_idle,
        history=settings.rlqs_demand_reports,
        change_rounds=settings.rlqs_change_rounds,
    )
    registry.register(QuotaCollector(quota, buckets=settings.rlqs_bucket_metrics))
    return RateLimitQuotaServicer(quota)
