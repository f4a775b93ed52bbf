"""The quota service ``ratewarden serve --rlqs`` runs, made from its settings.

``servicer`` is called by the composition root (``server/app.py``), which says where the
shares live: in this process on the memory store (``prefix`` None), or in the store,
through ``Fleet`` over the service's limiter, for several replicas (``prefix``: the
store's key prefix). Its metrics go to the service's registry.
"""

from __future__ import annotations

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

__all__ = ["servicer"]


def servicer(
    settings: Settings,
    config: RateLimitConfig,
    limiter: AsyncLimiter,
    registry: CollectorRegistry,
    prefix: str | None,
) -> RateLimitQuotaServicer:
    """The ``--rlqs`` stream handler over a new ``QuotaService``, its collector registered."""
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
