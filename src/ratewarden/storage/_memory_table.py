"""The memory store's state table, and the Python paths of ``hit`` and of one-rate ``hit_all``.

``MemoryTable`` is the base of ``MemoryStore`` and ``AsyncMemoryStore``
(``storage/memory.py``, which hold the operations). With ``SPEEDUPS`` its own
base is the C kernel (``ratewarden.storage._speedups.MemoryKernel``): handed the
state table, the lock and the shape cache at construction, it decides one-rate
gcra and fixed_window calls itself, and ``hit_all`` batches of them, and hands every
other call to the Python path here.

Keys and memory
---------------
A state expires when it is back to "as if never seen" (the algorithm's TTL):
a read then finds nothing. States live in an ``OrderedDict``. A key already
there is updated in place and keeps its position; a new key goes to the end
and sweeps the oldest end: it takes the two oldest entries out, one after the
other, and puts back at the end any that did not expire ``_KEEP_EXPIRED_US``
(a second) ago or more. The expired entry kept for that second lets a key that
comes back soon be written over in place. Every entry is looked at again within
half a pass over the store, so it holds at most about twice the keys written
within the last TTL + 1 s. Past ``max_keys`` the entry at the oldest end is
dropped (which forgets its usage, so size ``max_keys`` above the number of keys
active within the longest period).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ratewarden import checks
from ratewarden.algorithms import layered
from ratewarden.clock import Clock, SystemClock, check_clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _kernel, _plan
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix

__all__ = ["DEFAULT_MAX_KEYS", "SPEEDUPS", "MemoryTable", "StateKey"]

DEFAULT_MAX_KEYS = 1_000_000

#: Microseconds an expired state stays (unseen: a read treats it as absent) before a sweep
#: drops it, so that a key coming back soon is written over in place (the C kernel has its copy).
_KEEP_EXPIRED_US = 1_000_000


_speedups = _kernel.speedups

#: Whether ``MemoryStore`` decides one-rate gcra and fixed_window calls in C
#: (``ratewarden.storage._speedups``, built when a C compiler was there at install;
#: ``RATEWARDEN_PURE=1`` turns it off).
SPEEDUPS = _speedups is not None

# The table's base: the C kernel when it is built (it keeps its own copy of the store's
# ``clock`` and ``max_keys``, set by the properties below, and decides one-rate gcra and
# fixed_window calls over the state it is handed in ``__init__``), else nothing.
if TYPE_CHECKING:
    from ratewarden.storage._speedups import MemoryKernel as _Base
elif _speedups is not None:
    _Base = _speedups.MemoryKernel
else:
    _Base = object

#: ``key + layer suffix`` for a rate's state; ``(kind, Redis-style key)`` for the rest.
StateKey = str | tuple[str, str]

#: ``(index into keys, state, absolute expiry in us)``, written by ``_transact``.
Write = tuple[int, Any, int]

R = TypeVar("R")

# The kernel's own clock and max_keys (get/set descriptors it reads in C), which the
# table's properties set after their checks; None without the kernel.
_kernel_clock: Any = None if _speedups is None else vars(_speedups.MemoryKernel)["clock"]
_kernel_max_keys: Any = None if _speedups is None else vars(_speedups.MemoryKernel)["max_keys"]


def _check_max_keys(max_keys: object) -> int:
    """``max_keys`` as given, or ``ConfigurationError``: the constructor's check, and the
    setter's, so that a bad value never reaches the eviction (``-5`` emptied the table and
    then failed on it; ``"x"`` failed comparing)."""
    if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
        raise ConfigurationError(f"max_keys {max_keys!r} must be a whole number >= 1")
    return max_keys


class MemoryTable(_Base):
    """The state table and the Python path of ``hit``: the base of ``MemoryStore`` and
    ``AsyncMemoryStore``, whose operations are ``MemoryStore``'s methods."""

    @checks.keywords_checked
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        max_keys: int = DEFAULT_MAX_KEYS,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        clock = check_clock(type(self).__name__, clock)
        max_keys = _check_max_keys(max_keys)
        self.prefix = check_prefix(prefix)
        self.evictions = 0
        self._lock = threading.Lock()
        # State key -> (state, expires_at_us), in write order (oldest first). A rate's
        # state is under the string key + layer suffix; everything else (concurrency
        # slots, the operations of budgets and fair shares) under a (kind, Redis-style
        # key) tuple, which no string equals. Rate keys cannot collide with each other:
        # a suffix is always ":<algorithm>:<limit>:<period us>:<capacity>" (four
        # fields, no more colons), so the last four ':'-fields of a rate's state key are
        # its suffix and the rest its key. A string rather than a (key, suffix) tuple
        # for the hot path: its hash is computed once and kept, where a tuple's is
        # recomputed on every lookup, and a decision looks its key up three times or
        # more. An OrderedDict, not a dict: finding
        # the oldest entry of a dict walks past every slot its deletions left at the
        # front (3.9 us per write with 10,000 keys written round-robin, against 0.17 us
        # here), and the sweep and the eviction look at the oldest entry on every write.
        self._states: OrderedDict[StateKey, tuple[Any, int]] = OrderedDict()
        self._shapes = _plan.Shapes()
        if SPEEDUPS:
            # The kernel is handed everything it works on, once: it reads no attribute of
            # the store, and hands every call it does not take to the Python path.
            super().__init__(
                states=self._states,
                lock=self._lock,
                shapes=self._shapes,
                fallback=type(self)._hit,
                batch_fallback=type(self)._hit_all_single,
                evict=type(self)._evict,
                decision_type=Decision,
                rate_type=Rate,
                system_clock_type=SystemClock,
            )
        # Through the properties below: checked, and handed to the kernel when it is built.
        self.clock = clock if clock is not None else SystemClock()
        self.max_keys = max_keys

    @property
    def clock(self) -> Clock:
        """The store's clock. A new one is checked as the constructor's is (None: the
        system clock) and used from the next call."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock | None) -> None:
        checked = check_clock(type(self).__name__, clock)
        self._clock = checked if checked is not None else SystemClock()
        if _kernel_clock is not None:
            _kernel_clock.__set__(self, self._clock)

    @property
    def max_keys(self) -> int:
        """The bound on keys held; past it the oldest entries are dropped. A new value is
        checked as the constructor's is and used from the next call."""
        return self._max_keys

    @max_keys.setter
    def max_keys(self, max_keys: int) -> None:
        self._max_keys = _check_max_keys(max_keys)
        if _kernel_max_keys is not None:
            _kernel_max_keys.__set__(self, self._max_keys)

    def _read(self, key: StateKey, now: int) -> Any:
        entry = self._states.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._states[key]
            return None
        return entry[0]

    def _write(self, key: StateKey, state: Any, expires_at: int, now: int) -> None:
        """Store ``state`` under ``key`` until ``expires_at``; see "Keys and memory" above.

        A key already held is updated where it stands. A new key goes to the end,
        then the oldest end is swept and, past ``max_keys``, evicted.
        """
        states = self._states
        size = len(states)
        states[key] = (state, expires_at)
        if len(states) != size:
            self._sweep(now)
            if len(states) > self._max_keys:
                self._evict()

    def _sweep(self, now: int) -> None:
        """Take the two oldest keys out, one after the other: one expired for
        ``_KEEP_EXPIRED_US`` or longer stays out, any other goes back in at the end. Never
        as many as would put every older key behind the one just written (at the end): with
        three keys only the oldest, or an eviction past ``max_keys=2`` would drop the new key."""
        states = self._states
        for _ in range(min(2, len(states) - 2)):
            key, entry = states.popitem(last=False)  # never empty: a key was just added
            if entry[1] + _KEEP_EXPIRED_US > now:
                states[key] = entry

    def _evict(self) -> None:
        """Drop the oldest entries past ``max_keys``, counting them (the kernel calls it too)."""
        states = self._states
        while len(states) > self._max_keys:
            states.popitem(last=False)
            self.evictions += 1

    def _hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow; see ``Limiter.hit``."""
        shape = self._shapes.get(algorithm, rates, cost)
        if type(key) is not str or not key or not key.isascii():
            checks.check_key(key)
        now = self._clock.now_us()
        cost = shape.cost
        if shape.single:
            # One rate (the common case): no layering, one state, one outcome.
            state_key = key + shape.suffixes[0]
            with self._lock:
                entry = self._states.get(state_key)
                live = entry is not None and entry[1] > now
                outcome, state, ttl_us = shape.check(
                    shape.params[0], entry[0] if entry is not None and live else None, now, cost
                )
                if outcome[0] and cost > 0 and ttl_us > 0:
                    # An expired entry is as if never seen, and is written over in place.
                    self._write(state_key, state, now + ttl_us, now)
                elif entry is not None and (not live or (outcome[0] and cost > 0)):
                    del self._states[state_key]  # expired and not written, or back to empty
            return _decisions.single(shape.rates[0], outcome, cost)
        state_keys = [key + suffix for suffix in shape.suffixes]
        with self._lock:
            states = [self._read(k, now) for k in state_keys]
            outcomes, writes = layered(shape.check, shape.params, states, now, cost)
            if writes is not None:
                for state_key, (state, ttl_us) in zip(state_keys, writes, strict=True):
                    self._keep(state_key, state, ttl_us, now)
        return _decisions.to_decision(shape.rates, outcomes, cost)

    def _hit_all_single(self, found: _plan.Batch) -> list[Decision]:
        """``MemoryStore.hit_all`` when every call has one rate (the common case):
        ``layered_each`` over one layer a call, written out, and each call's outcome
        straight into its Decision (``batch_decisions`` less the layers' bookkeeping)."""
        state_keys = [key + shape.suffixes[0] for key, shape in found]
        check = found[0][1].check
        now = self._clock.now_us()
        with self._lock:
            states = [self._read(state_key, now) for state_key in state_keys]
            steps = [
                check(shape.params[0], state, now, shape.cost)
                for (_, shape), state in zip(found, states, strict=True)
            ]
            admitted = all(step[0][0] for step in steps)
            if admitted:
                for state_key, (_, shape), step in zip(state_keys, found, steps, strict=True):
                    if shape.cost > 0:
                        self._keep(state_key, step[1], step[2], now)
        if admitted:
            return [
                _decisions.single(shape.rates[0], step[0], shape.cost)
                for (_, shape), step in zip(found, steps, strict=True)
            ]
        # Denied: nothing was written; a call that would have passed is the check it became.
        decisions = []
        for (_, shape), state, step in zip(found, states, steps, strict=True):
            outcome = step[0]
            if outcome[0]:
                decisions.append(
                    _decisions.single(shape.rates[0], check(shape.params[0], state, now, 0)[0], 0)
                )
            else:
                decisions.append(_decisions.single(shape.rates[0], outcome, shape.cost))
        return decisions

    #: The store's hit, with no Python frame in front of C: the kernel's ``decide`` when it is
    #: built (one-rate gcra and fixed_window calls in C, every other call handed to ``_hit``),
    #: else ``_hit``.
    _decide = _hit if _speedups is None else _Base.decide

    #: ``hit_all`` when every call has one rate, on the batch ``_plan.batch`` validated: the
    #: kernel's ``decide_all`` when it is built (gcra and fixed_window batches in C, any other
    #: handed to ``_hit_all_single``), else ``_hit_all_single``.
    _decide_all = _hit_all_single if _speedups is None else _Base.decide_all

    def _transact(
        self, keys: Sequence[str], step: Callable[[list[Any], int], tuple[R, Sequence[Write]]]
    ) -> R:
        """Run ``step(states, now)`` over string keys under the lock: the twin of one Lua script.

        ``step`` returns its result and the writes ``(index into keys, state,
        absolute expiry in us)``; an expiry at or before now deletes the key.
        Operations beyond the rate algorithms (token budgets, fair shares)
        pass their pure twin here and the same ARGV they send to Redis.
        """
        now = self._clock.now_us()
        state_keys = [("op", key) for key in keys]
        with self._lock:
            result, writes = step([self._read(key, now) for key in state_keys], now)
            for index, state, expires_at in writes:
                if expires_at > now:
                    self._write(state_keys[index], state, expires_at, now)
                else:
                    self._states.pop(state_keys[index], None)
        return result

    def _keep(self, state_key: StateKey, state: Any, ttl_us: int, now: int) -> None:
        if ttl_us > 0:
            self._write(state_key, state, now + ttl_us, now)
        else:
            self._states.pop(state_key, None)

    def __len__(self) -> int:
        """Keys held now, expired ones included until they are swept."""
        return len(self._states)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
