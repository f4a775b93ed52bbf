"""Concurrency: at most ``limit`` slots in flight per key, held by leases.

A request acquires a slot under a lease id before it starts and releases it when
it finishes. Every lease has an expiry: a holder that crashes (and never
releases) loses its slots once the lease's TTL passes, so capacity comes back by
itself. Long-running holders renew their lease before it expires.

The state is a tuple of leases ``(lease_id, slots, expires_us)``. Acquiring with
a lease id that is already held renews it and changes its slot count, so a
retried acquire never takes two slots. Nothing here reads a clock; the Lua twin
is ``storage/lua/concurrency.lua`` (a hash of lease id -> "expires_us slots").

Effective window (``refill_after_us``): if no holder releases early, the time
until a slot frees once ``remaining`` more are taken now (under leases of this
acquire's TTL): when the soonest-expiring lease lapses, that of the slots just
taken when no lease is held. (With more slots held than the limit, as after the
limit was lowered, enough leases must lapse to bring them below it.) A release
frees a slot sooner: the time is the longest wait, as ``retry_after`` is.
"""

from __future__ import annotations

from ratewarden.algorithms._base import NEVER, Outcome

__all__ = ["NAME", "Lease", "State", "acquire", "active", "release", "renew"]

NAME = "concurrency"

#: ``(lease_id, slots, expires_us)``
Lease = tuple[str, int, int]
State = tuple[Lease, ...]


def active(state: State | None, now_us: int) -> State:
    """The leases that have not expired at ``now_us``, in the order held."""
    return tuple(lease for lease in state or () if lease[2] > now_us)


def _lapsed(held: list[tuple[int, int]], needed: int, now_us: int) -> int:
    """Microseconds until ``needed`` of the ``(slots, expires_us)`` have lapsed, soonest first."""
    wait = 0
    for slots, expires in sorted(held, key=lambda pair: pair[1]):
        needed -= slots
        wait = expires - now_us
        if needed <= 0:
            break
    return wait


def _outcome(
    allowed: bool, leases: State, now_us: int, limit: int, lease_id: str, slots: int, ttl_us: int
) -> Outcome:
    in_use = sum(lease[1] for lease in leases)
    reset_after = max((lease[2] for lease in leases), default=now_us) - now_us
    held = [(lease[1], lease[2]) for lease in leases]
    if allowed:
        retry_after = 0
    elif slots > limit:
        retry_after = NEVER
    else:
        # The longest this request must wait if no holder releases early: until enough
        # of the other leases, soonest-expiring first, have lapsed (its own lease's slots
        # are replaced by the ones it asks for, not added to them).
        others = [(lease[1], lease[2]) for lease in leases if lease[0] != lease_id]
        retry_after = _lapsed(others, sum(pair[0] for pair in others) + slots - limit, now_us)
    remaining = max(limit - in_use, 0)
    if remaining > 0:
        held.append((remaining, now_us + ttl_us))
    # With in_use + remaining slots held (at least the limit), one more needs this many back.
    refill_after = _lapsed(held, in_use + remaining + 1 - limit, now_us)
    return Outcome(allowed, remaining, reset_after, retry_after, 0, refill_after)


def acquire(
    state: State | None, now_us: int, limit: int, lease_id: str, slots: int, ttl_us: int
) -> tuple[Outcome, State, int]:
    """Take ``slots`` under ``lease_id`` for ``ttl_us``; returns outcome, state to keep, its TTL."""
    leases = active(state, now_us)
    others = tuple(lease for lease in leases if lease[0] != lease_id)
    in_use = sum(lease[1] for lease in others)
    if slots > limit or in_use + slots > limit:
        outcome = _outcome(False, leases, now_us, limit, lease_id, slots, ttl_us)
        return outcome, leases, _ttl(leases, now_us)
    kept = (*others, (lease_id, slots, now_us + ttl_us))
    return _outcome(True, kept, now_us, limit, lease_id, slots, ttl_us), kept, _ttl(kept, now_us)


def release(state: State | None, now_us: int, lease_id: str) -> tuple[bool, State, int]:
    """Give back ``lease_id``'s slots; False when it was not held (released or expired)."""
    leases = active(state, now_us)
    kept = tuple(lease for lease in leases if lease[0] != lease_id)
    return len(kept) != len(leases), kept, _ttl(kept, now_us)


def renew(state: State | None, now_us: int, lease_id: str, ttl_us: int) -> tuple[bool, State, int]:
    """Extend a held lease to ``now + ttl_us``; False when it has already lapsed."""
    leases = active(state, now_us)
    kept = tuple(
        (lid, held, now_us + ttl_us) if lid == lease_id else (lid, held, expires)
        for lid, held, expires in leases
    )
    return any(lease[0] == lease_id for lease in leases), kept, _ttl(kept, now_us)


def _ttl(leases: State, now_us: int) -> int:
    return max((lease[2] for lease in leases), default=now_us) - now_us
