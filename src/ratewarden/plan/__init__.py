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
    regions     <= sum over regions of rate_r x (sync_interval + region_lag)

``measure`` runs real decisions on a Redis server and reads ``MEMORY USAGE``
per key and the server time per script call from ``INFO commandstats``, so the
plan can use this deployment's numbers instead of rules of thumb.
docs/capacity.md states the formulas' assumptions.
"""

from __future__ import annotations

from ratewarden.plan._measure import Measured, measure
from ratewarden.plan._model import Plan, PlanInput, Region, Row, format_plan, plan

__all__ = ["Measured", "Plan", "PlanInput", "Region", "Row", "format_plan", "measure", "plan"]
