"""Usage a budget's store could not record, owed per key until it can: ``Backlog``.

A token budget's ``charge`` records usage that already happened (Envoy's charge
when a stream is done, a provider's bill). When the store is down the charge
fails, and without a backlog those tokens are never counted: once the store is
back, the tenant may spend them again. A budget given a ``Backlog`` keeps what it
could not charge, summed per key and axis, and pays it before that key's next
``reserve``, ``charge`` or ``peek`` reaches the store (one more store step, only
while something is owed), or when ``replay`` is called.

No I/O here; thread-safe (one lock), and bounded: at most ``max_keys`` keys are
owed, and usage for another key beyond that is dropped and counted in
``dropped``.

A settle the store failed owes its overrun too, and the backlog remembers which
reservation owed it (``owe_overrun``), at most ``max_keys`` of them: a retry of
that settle then charges none of it again, and one finding the reservation
settled already (the failed settle ran after all) takes it back.
"""

from __future__ import annotations

import logging
import threading

from ratewarden.errors import ConfigurationError

__all__ = ["Backlog"]

log = logging.getLogger("ratewarden.budgets")


class Backlog:
    """What a budget owes its store, per key: a tuple of units, one per axis.

    ``owe(key, costs)`` adds, ``take(key)`` removes and returns what ``key`` owed
    (None when nothing). One backlog belongs to one budget (``claim``): the units
    mean that budget's axes.
    """

    def __init__(self, max_keys: int = 10_000) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(f"max_keys {max_keys!r} must be a whole number >= 1")
        self.max_keys = max_keys
        #: Usage dropped because ``max_keys`` keys were already owed: (key, costs) calls.
        self.dropped = 0
        self._owed: dict[str, tuple[int, ...]] = {}
        # Overruns owed by settles the store failed, by (key, reservation id).
        self._overruns: dict[tuple[str, str], tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self._owner: object | None = None

    def claim(self, owner: object) -> None:
        """Make ``owner`` (a budget) this backlog's only user."""
        if self._owner is not None and self._owner is not owner:
            raise ConfigurationError(
                "this Backlog already belongs to another budget: give each budget its own"
            )
        self._owner = owner

    def owe(self, key: str, costs: tuple[int, ...]) -> bool:
        """Add ``costs`` to what ``key`` owes; False (and ``dropped`` counts it) when
        ``max_keys`` other keys are owed already."""
        if not any(costs):
            return True
        with self._lock:
            owed = self._owed.get(key)
            if owed is None:
                if len(self._owed) >= self.max_keys:
                    self.dropped += 1
                    if self.dropped & (self.dropped - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...
                        log.warning(
                            "token budget backlog full (%d keys owed): charges dropped so far: %d",
                            self.max_keys,
                            self.dropped,
                            extra={"event": "budget_backlog_full"},
                        )
                    return False
                self._owed[key] = tuple(costs)
            else:
                self._owed[key] = tuple(a + b for a, b in zip(owed, costs, strict=True))
            return True

    def owe_overrun(
        self, key: str, reservation_id: str, used: tuple[int, ...], held: tuple[int, ...]
    ) -> bool:
        """Owe what a settle of ``reservation_id`` the store failed used (``used``) beyond
        the reservation (``held``), remembered as that reservation's (``less_overrun``);
        False when the backlog is full."""
        over = tuple(max(0, u - r) for u, r in zip(used, held, strict=True))
        if not any(over):
            return True
        if not self.owe(key, over):
            return False
        with self._lock:
            known = self._overruns.pop((key, reservation_id), None)
            if known is not None:
                over = tuple(a + b for a, b in zip(known, over, strict=True))
            elif len(self._overruns) >= self.max_keys:
                # The oldest is forgotten: a retry of its settle would charge it again.
                del self._overruns[next(iter(self._overruns))]
            self._overruns[(key, reservation_id)] = over
        return True

    def less_overrun(
        self, key: str, reservation_id: str, used: tuple[int, ...], held: tuple[int, ...]
    ) -> tuple[int, ...]:
        """``used`` less the overrun failed settles of ``reservation_id`` owe, down to the
        reservation (``held``) at most: a retried settle charges none of it again, the
        backlog charging it once."""
        with self._lock:
            owed = self._overruns.get((key, reservation_id))
        if owed is None:
            return used
        return tuple([max(min(u, r), u - o) for u, r, o in zip(used, held, owed, strict=True)])

    def overrun_done(self, key: str, reservation_id: str, *, ran: bool) -> None:
        """A later settle of ``reservation_id`` reached the store: forget its overrun, and
        when the reservation was found settled already (``ran``: a failed settle ran after
        all, and charged it) take back what ``key`` still owes of it."""
        with self._lock:
            over = self._overruns.pop((key, reservation_id), None)
            owed = self._owed.get(key)
            if not ran or over is None or owed is None:
                return
            left = tuple(max(0, a - b) for a, b in zip(owed, over, strict=True))
            if any(left):
                self._owed[key] = left
            else:
                del self._owed[key]

    def take(self, key: str) -> tuple[int, ...] | None:
        """What ``key`` owes, no longer owed (``owe`` it back if paying it fails)."""
        if not self._owed:
            return None
        with self._lock:
            return self._owed.pop(key, None)

    def owing(self) -> list[str]:
        """The keys that owe something now, in the order they came to owe (a key owed
        again after its payment failed is the newest)."""
        with self._lock:
            return list(self._owed)

    def owed(self, key: str) -> tuple[int, ...] | None:
        """What ``key`` owes now, left owed (None when nothing)."""
        with self._lock:
            return self._owed.get(key)

    def __len__(self) -> int:
        return len(self._owed)

    def __bool__(self) -> bool:
        return bool(self._owed)

    def __repr__(self) -> str:
        return f"Backlog({len(self._owed)} keys owed, max_keys={self.max_keys})"
