"""LeaseBook: units of a key's global quota taken in advance and spent in this process.

A lease is bought from the global store with one ordinary hit of cost ``k``:
the units are charged there first, so every unit spent here was already
counted fleet-wide, and the fleet can never admit more than the store charged.
What leases cost is timing: units bought before an interval may be spent in
it, so in any interval the fleet may admit up to the balances outstanding when
it began on top of what the store allows in it. A balance is capped at
``k - 1`` units (what one buyer leaves after spending), so that bound is at most
``processes * (k - 1)`` per key. Only one request per key buys at a time; others
that find the balance short meanwhile ask the store for their own cost, so a
burst of concurrent requests neither buys many leases nor strands their units.

A balance expires ``ttl`` after its last top-up. Unused units are not given
back to the store: they are already counted there and age out with the window
like any other use (docs/two-tiers.md has the numbers).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError

__all__ = ["DEFAULT_LEASE_KEYS", "Balance", "LeaseBook"]

#: Keys holding a balance at once by default. Dropping one only wastes its units.
DEFAULT_LEASE_KEYS = 10_000


class Balance:
    """One key's leased units: how many, until when, and the store's Decision that granted them."""

    __slots__ = ("expires_us", "grant", "granted_us", "units")

    def __init__(self, units: int, expires_us: int, grant: Decision, granted_us: int) -> None:
        self.units = units
        self.expires_us = expires_us
        self.grant = grant
        self.granted_us = granted_us


class LeaseBook:
    """Per-key balances of leased units, each with an expiry; thread-safe and bounded.

    ``units`` is ``k``, the size of one lease. ``spend`` takes from a balance
    that covers the cost; ``shortfall`` says how much is missing otherwise;
    ``credit`` adds what the store granted, minus what the buying request spends.
    ``wasted`` counts units that lapsed unspent (expiry, eviction, reset, cap).
    """

    __slots__ = ("_balances", "_buying", "_lock", "cap", "max_keys", "units", "wasted")

    def __init__(self, units: int, *, max_keys: int = DEFAULT_LEASE_KEYS) -> None:
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise ConfigurationError(f"lease size {units!r} must be a whole number of units >= 1")
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(f"lease max_keys {max_keys!r} must be a whole number >= 1")
        self.units = units
        self.cap = units - 1
        self.max_keys = max_keys
        self.wasted = 0
        self._balances: OrderedDict[Hashable, Balance] = OrderedDict()
        self._buying: set[Hashable] = set()
        self._lock = threading.Lock()

    def start_buying(self, key: Hashable) -> bool:
        """Become ``key``'s one buyer; False while another request is buying its lease.

        One buyer per key at a time keeps every balance under ``k`` units however
        many threads or tasks find it empty at once; the others ask the store for
        their own cost only. The buyer must call ``stop_buying`` when done.
        """
        with self._lock:
            if key in self._buying:
                return False
            self._buying.add(key)
            return True

    def stop_buying(self, key: Hashable) -> None:
        """The buyer of ``key``'s lease is done (granted, denied, failed or cancelled)."""
        with self._lock:
            self._buying.discard(key)

    def spend(self, key: Hashable, cost: int, now_us: int) -> Balance | None:
        """Take ``cost`` units from ``key``'s live balance; a snapshot of what is left, or None."""
        with self._lock:
            entry = self._live(key, now_us)
            if entry is None or entry.units < cost:
                return None
            entry.units -= cost
            return Balance(entry.units, entry.expires_us, entry.grant, entry.granted_us)

    def shortfall(self, key: Hashable, cost: int, now_us: int) -> int:
        """Units missing for ``cost``: what must be bought at the least."""
        with self._lock:
            entry = self._live(key, now_us)
            return max(0, cost - (0 if entry is None else entry.units))

    def credit(
        self, key: Hashable, grant: Decision, cost: int, now_us: int, ttl_us: int
    ) -> Balance:
        """Add the ``grant.cost`` units bought and spend ``cost`` of the total at once.

        The balance left (at most ``k - 1``) then lives until ``now_us + ttl_us``.
        """
        with self._lock:
            entry = self._live(key, now_us)
            held = 0 if entry is None else entry.units
            left = max(0, held + grant.cost - cost)
            if left > self.cap:
                self.wasted += left - self.cap
                left = self.cap
            fresh = Balance(left, now_us + ttl_us, grant, now_us)
            self._balances[key] = fresh
            self._balances.move_to_end(key)
            while len(self._balances) > self.max_keys:
                self.wasted += self._balances.popitem(last=False)[1].units
            return fresh

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s balance (its units lapse unspent)."""
        with self._lock:
            entry = self._balances.pop(key, None)
            if entry is not None:
                self.wasted += entry.units

    def outstanding(self, now_us: int) -> int:
        """Units held across every live key: what this process may still admit unasked."""
        with self._lock:
            return sum(e.units for e in self._balances.values() if e.expires_us > now_us)

    def _live(self, key: Hashable, now_us: int) -> Balance | None:
        entry = self._balances.get(key)
        if entry is not None and entry.expires_us <= now_us:
            del self._balances[key]
            self.wasted += entry.units
            return None
        return entry

    def __len__(self) -> int:
        return len(self._balances)

    def __repr__(self) -> str:
        return f"LeaseBook(units={self.units}, keys={len(self._balances)})"
