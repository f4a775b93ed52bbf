"""TierCounts: what the tiers did, counted in this process (for tests, docs and dashboards)."""

from __future__ import annotations

import threading

__all__ = ["TierCounts"]

_FIELDS = (
    "degraded",
    "lease_hits",
    "leases_bought",
    "local_denials",
    "negative_hits",
    "store_calls",
)


class TierCounts:
    """Counters, each a plain int attribute; thread-safe increments.

    - ``store_calls``: calls sent to the global store (one round trip each).
    - ``negative_hits``: denials answered from the negative cache.
    - ``local_denials``: denials by the local bucket.
    - ``lease_hits``: requests paid from a lease, with no store call.
    - ``leases_bought``: leases granted by the store.
    - ``degraded``: decisions made by the failure mode.
    """

    __slots__ = ("_lock", *_FIELDS)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.degraded = 0
        self.lease_hits = 0
        self.leases_bought = 0
        self.local_denials = 0
        self.negative_hits = 0
        self.store_calls = 0

    def add(self, name: str) -> None:
        """Count one more ``name``."""
        with self._lock:
            # Once per request (a store call, or a lease paid): no getattr/setattr.
            if name == "store_calls":
                self.store_calls += 1
            elif name == "lease_hits":
                self.lease_hits += 1
            else:
                setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, int]:
        """Every counter by name."""
        with self._lock:
            return {name: int(getattr(self, name)) for name in _FIELDS}

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value}" for name, value in self.as_dict().items())
        return f"TierCounts({inner})"
