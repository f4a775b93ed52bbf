"""Multi-region budgets: three strategies behind one ``hit(key, rates, cost)``.

- ``RegionalQuota``: the global limit split into per-region allowances (static
  shares, or shares rebalanced from traffic through ``DemandExchange``); never
  over the limit, wasteful when traffic shifts.
- ``ReconciledBudget``: each region enforces on its own Redis and exchanges
  grow-only counts (``GCounter``, merged by max) every sync interval; over the
  limit by at most ``overshoot_bound(...)`` per window, exported through
  ``Metrics.region_overshoot``. ``SyncThread`` runs the rounds.
- ``HomeRegion``: a tenant's checks go to its home region's store; exact, but
  remote checks pay the cross-region round trip.

Each has an asyncio twin, written once with it and awaited rather than
blocking: ``AsyncRegionalQuota`` (with ``AsyncDemandExchange``),
``AsyncReconciledBudget`` (with ``SyncTask``, the rounds in an asyncio task) and
``AsyncHomeRegion``.

Nothing here opens a connection: each strategy decides through a ``Limiter``
(``AsyncLimiter``) and reaches each region's state only through the stores its
caller gives it (a ``ratewarden.storage.regions.RegionStore`` per region for the
exchanges, an ``AsyncRegionStore`` for the asyncio twins; or, with no Redis, a
``ratewarden.storage.memory_regions.MemoryRegionStore`` per region, all in one
process, and ``AsyncMemoryRegionStore``).
``python -m ratewarden.regions bound ...`` prints the bound for a configuration.
See docs/regions.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.regions._bound import (
    overshoot_bound,
    parse_region_rate,
    split_allowances,
    traffic_weights,
)
from ratewarden.regions._exchange import AsyncDemandExchange, DemandExchange
from ratewarden.regions._gcounter import GCounter
from ratewarden.regions._pinning import AsyncHomeRegion, HomeRegion
from ratewarden.regions._quotas import AsyncRegionalQuota, RegionalQuota
from ratewarden.regions._reconcile import (
    AsyncReconciledBudget,
    PeerView,
    ReconciledBudget,
    SyncReport,
)
from ratewarden.regions._syncers import SyncTask, SyncThread

__all__ = [
    "AsyncDemandExchange",
    "AsyncHomeRegion",
    "AsyncReconciledBudget",
    "AsyncRegionStrategy",
    "AsyncRegionalQuota",
    "DemandExchange",
    "GCounter",
    "HomeRegion",
    "PeerView",
    "ReconciledBudget",
    "RegionStrategy",
    "RegionalQuota",
    "SyncReport",
    "SyncTask",
    "SyncThread",
    "overshoot_bound",
    "parse_region_rate",
    "split_allowances",
    "traffic_weights",
]


class RegionStrategy(Protocol):
    """What the three synchronous strategies share: one decision per call."""

    def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Admit ``cost`` on ``key`` under ``rates``, or say why not."""
        ...


class AsyncRegionStrategy(Protocol):
    """What the three asyncio twins share: one awaited decision per call."""

    async def hit(self, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Decision:
        """Admit ``cost`` on ``key`` under ``rates``, or say why not."""
        ...
