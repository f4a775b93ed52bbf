"""Two tiers: an in-process tier in front of the global store, and what to do when the store fails.

::

    tiers = TwoTier(RedisStore.from_url(url), local=0.5, lease=10, failure_mode="local")
    decision = tiers.hit("api-key:abc", Rate.parse("600/minute"))

A request meets, in order: the negative cache (a key the store denied until T
is denied here until T), the local bucket (a per-process share of the rate),
a lease (units bought from the store in advance), and only then the store. When
the store is unavailable, or the circuit breaker is open, the failure mode
(``open``, ``closed`` or ``local``) answers and ``Decision.degraded`` names it.
docs/two-tiers.md states how far each mode may admit over the limit.

Every part lives in the decision core (``ratewarden.limiter``); ``TwoTier`` is a
``Limiter`` with them on by default, and the parts are re-exported here.
"""

from __future__ import annotations

from ratewarden.limiter import (
    FAILURE_MODES,
    CircuitBreaker,
    LeaseBook,
    NegativeCache,
    TierCounts,
)
from ratewarden.tiers._limiters import AsyncTwoTier, TwoTier

__all__ = [
    "FAILURE_MODES",
    "AsyncTwoTier",
    "CircuitBreaker",
    "LeaseBook",
    "NegativeCache",
    "TierCounts",
    "TwoTier",
]
