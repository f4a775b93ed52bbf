"""Concurrency slots: what a granted (or refused) slot request is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ratewarden.checks import MAX_LEASE_SECONDS
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError

__all__ = ["MIN_LEASE_SECONDS", "Lease", "lease_ttl_us"]

#: The shortest slot lease, in seconds: a lease must outlive the store's round trip that
#: grants it, and anything shorter is a unit mistake (microseconds or nanoseconds given as
#: seconds) that lapses before its holder hears it was granted.
MIN_LEASE_SECONDS = 0.001


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
    """A slot lease's ttl in whole microseconds (rounded up); raises on a bad value (not a
    number of seconds from ``MIN_LEASE_SECONDS`` to ``MAX_LEASE_SECONDS``)."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"lease ttl {ttl!r} must be a positive number of seconds")
    if ttl < MIN_LEASE_SECONDS:
        raise ConfigurationError(
            f"lease ttl {ttl!r} is too short: at least {MIN_LEASE_SECONDS} s (1 ms); a shorter "
            "lease lapses before its holder hears it was granted"
        )
    if ttl > MAX_LEASE_SECONDS:
        raise ConfigurationError(
            f"lease ttl {ttl!r} is too long: at most {MAX_LEASE_SECONDS:,} seconds (365 days); "
            "a crashed holder's slots come back only after it, so renew long work instead"
        )
    return math.ceil(ttl * 1_000_000)
