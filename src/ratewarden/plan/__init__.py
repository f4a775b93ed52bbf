"""Capacity planning: Redis memory, script calls, bandwidth, latency and over-admission.

``ratewarden plan`` turns what a platform team knows (peak requests per
second, the share the local tier rejects, the share needing a global check,
descriptors per check, active keys, the algorithm, bytes per key, what one
primary sustains, the round trip) into what it must provision, each figure
printed with the formula that made it::

    calls/s     = rps x (1 - local_reject) x global_share x descriptors
    per primary = calls/s / primaries
    memory      = keys x bytes_per_key            (x (1 + replicas) with replicas)
    bandwidth   = calls/s x bytes_per_call
    primaries   = ceil(calls/s / (calls_per_primary x max_utilization))
    latency     = rtt + service / (1 - utilization)   service = 1 / calls_per_primary (M/M/1)

and the over-admission each distributed setting allows on one key:

    failover    <= capacity + rate x replication_lag  (counters rewind by the lag)
    leases      <= instances x (lease - 1)            (ratewarden.tiers' cap per balance)
    regions     <= sum_r (burst_r + ceil(rate_r x (sync_interval + region_lag)))
                   (ratewarden.regions.overshoot_bound: the bound ReconciledBudget keeps to)

``ratewarden.storage.measure.measure`` runs real decisions on a Redis server and
reads ``MEMORY USAGE`` per key and the server time per script call from ``INFO
commandstats``, so the plan can use this deployment's numbers instead of rules
of thumb; ``ratewarden plan --measure URL`` opens the store for it in the
command line (the composition root). This package talks to no store itself.
docs/capacity.md states the formulas' assumptions.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ratewarden.plan._model import Plan, PlanInput, Region, Row, format_plan, plan
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage.measure import Measured

__all__ = ["Plan", "PlanInput", "Region", "Row", "format_plan", "plan"]


def __getattr__(name: str) -> Any:
    # Measuring talks to Redis, so it moved to ratewarden.storage.measure. The old names
    # still resolve, with a DeprecationWarning, for one release (docs/reference.md says so).
    if name == "Measured":
        warnings.warn(
            "ratewarden.plan.Measured is deprecated; import Measured from "
            "ratewarden.storage.measure",
            DeprecationWarning,
            stacklevel=2,
        )
        from ratewarden.storage.measure import Measured

        return Measured
    if name != "measure":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "ratewarden.plan.measure(url, ...) is deprecated; open the store "
        "(RedisStore.from_url(url, timeout=2.0)) and call "
        "ratewarden.storage.measure.measure(store, ...)",
        DeprecationWarning,
        stacklevel=2,
    )

    def measure(
        url: str,
        algorithm: str,
        limit: Rate,
        key_length: int = 32,
        calls: int = 2_000,
        prefix: str = "rw",
    ) -> Measured:
        """The old call: a store opened on ``url`` (2 s timeout), measured, closed."""
        from ratewarden.storage.measure import measure as measure_store
        from ratewarden.storage.redis import RedisStore

        store = RedisStore.from_url(url, prefix=prefix, timeout=2.0)
        try:
            return measure_store(store, algorithm, limit, key_length=key_length, calls=calls)
        finally:
            store.close()

    return measure
