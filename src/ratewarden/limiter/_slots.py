"""Concurrency slots: what a granted (or refused) slot request is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ratewarden.checks import MAX_LEASE_SECONDS
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError

__all__ = ["Lease", "lease_ttl_us"]


@dataclass(frozen=True, slots=True)
class Lease:
    """A concurrency slot request: held when ``decision.allowed``; release it when done."""

    key: str
    lease_id: str
    limit: int
    slots: int
    ttl: float
    decision: Decision

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.decision.allowed


def lease_ttl_us(ttl: float) -> int:
    """A slot lease's ttl in whole microseconds (rounded up); raises on a bad value."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"lease ttl {ttl!r} must be a positive number of seconds")
    if ttl > MAX_LEASE_SECONDS:
        raise ConfigurationError(
            f"lease ttl {ttl!r} is too long: at most {MAX_LEASE_SECONDS:,} seconds (365 days); "
            "a crashed holder's slots come back only after it, so renew long work instead"
        )
    return max(1, math.ceil(ttl * 1_000_000))
