"""The embedded store: state in this process, updated under one lock.

``MemoryStore`` runs the pure algorithms directly, so it is the reference
behaviour the Redis scripts are tested against; ``AsyncMemoryStore`` is its
asyncio face (its methods, awaited), with a blocking view for
``AsyncLimiter.hit_now``. Both are a ``MemoryTable`` (``_memory_table``: the
state, its expiry and eviction, the Python path of ``hit`` and, with
``SPEEDUPS``, the C kernel that decides one-rate gcra and fixed_window calls).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from types import MethodType
from typing import Any, Concatenate, ParamSpec, TypeVar

from ratewarden import checks
from ratewarden.algorithms import concurrency, layered_each
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _plan
from ratewarden.storage._memory_table import SPEEDUPS, MemoryTable
from ratewarden.storage._ops import Op

__all__ = ["SPEEDUPS", "AsyncMemoryStore", "MemoryStore"]

T = TypeVar("T")
P = ParamSpec("P")


class MemoryStore(MemoryTable):
    """Thread-safe in-process store. ``MemoryStore(clock=ManualClock())`` in tests.

    With ``SPEEDUPS``, ``hit`` is the C kernel's ``decide``: it decides calls with one
    gcra or fixed_window rate, an ASCII key and a whole cost, and hands every other call
    to the Python path (``_hit``), which stays the reference. ``hit_all`` asks its
    ``decide_calls`` first (a plainly valid batch of one-rate gcra or fixed_window calls,
    validated and decided in C), then validates any other batch with ``_plan.batch`` and
    hands it, when every call has one rate, to ``decide_all`` (gcra and fixed_window in C,
    any other to ``_hit_all_single``).

    Its methods use only the state ``MemoryTable`` holds: ``AsyncMemoryStore`` awaits
    them and its blocking view calls them, each on its own state.
    """

    hit = MemoryTable._decide

    def hit_all(self, algorithm: str, calls: Sequence[_plan.BatchCall]) -> list[Decision]:
        """Decide several ``(key, rates, cost)`` calls of ``algorithm`` in one atomic step.

        All or nothing: when every call is allowed, each consumes its cost;
        otherwise none consumes anything, a denied call says why (its
        ``retry_after``), and a call that would have passed on its own is reported
        allowed with cost 0 (the check it became). Two calls may not count the
        same key on the same rate. Never None here (see ``RedisStore.hit_all``).
        """
        if SPEEDUPS:
            # The kernel validates and decides a plainly valid one-rate gcra or fixed_window
            # batch; None for any other, validated and decided below.
            decided = self.decide_calls(algorithm, calls)
            if decided is not None:
                return decided
        found = _plan.batch(self._shapes, algorithm, calls)
        if not found:
            return []
        if all(shape.single for _, shape in found):
            return self._decide_all(found)  # in C for gcra and fixed_window batches
        state_keys: list[str] = []
        params: list[tuple[int, ...]] = []
        costs: list[int] = []
        for key, shape in found:
            state_keys += (key + suffix for suffix in shape.suffixes)
            params += shape.params
            costs += [shape.cost] * len(shape.params)
        check = found[0][1].check
        now = self._clock.now_us()
        with self._lock:
            states = [self._read(state_key, now) for state_key in state_keys]
            outcomes, writes = layered_each(check, params, states, now, costs)
            if writes is not None:
                for state_key, write in zip(state_keys, writes, strict=True):
                    if write is not None:
                        self._keep(state_key, write[0], write[1], now)
        return _decisions.batch_decisions(found, outcomes, writes is not None)

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        """Forget the state of ``key`` under these rates."""
        shape = self._shapes.get(algorithm, rates, 0)
        key = checks.check_key(key)
        with self._lock:
            for suffix in shape.suffixes:
                self._states.pop(key + suffix, None)

    def acquire_slot(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Decision:
        """Hold ``slots`` of ``limit`` concurrent slots on ``key`` for ``ttl_us`` (a lease)."""
        checks.check_slot_request(limit, slots, ttl_us, lease_id)
        state_key = ("slot", _plan.slot_key(self.prefix, key))
        now = self._clock.now_us()
        with self._lock:
            outcome, state, ttl = concurrency.acquire(
                self._read(state_key, now), now, limit, lease_id, slots, ttl_us
            )
            self._keep(state_key, state, ttl, now)
        return _decisions.slot_decision(limit, slots, outcome)

    def release_slot(self, key: str, lease_id: str) -> bool:
        """Give the lease's slots back; False if it was not held (expired or never granted)."""
        state_key = ("slot", _plan.slot_key(self.prefix, key))
        lease_id = checks.check_lease_id(lease_id)
        now = self._clock.now_us()
        with self._lock:
            held, state, ttl = concurrency.release(self._read(state_key, now), now, lease_id)
            self._keep(state_key, state, ttl, now)
        return held

    def renew_slot(self, key: str, lease_id: str, ttl_us: int) -> bool:
        """Extend a held lease to ``ttl_us`` from now; False if it was not held."""
        state_key = ("slot", _plan.slot_key(self.prefix, key))
        checks.check_slot_request(1, 1, ttl_us, lease_id)
        now = self._clock.now_us()
        with self._lock:
            held, state, ttl = concurrency.renew(self._read(state_key, now), now, lease_id, ttl_us)
            self._keep(state_key, state, ttl, now)
        return held

    def apply(self, op: Op) -> list[int]:
        """Run ``op`` (token budgets, fair shares: ``ratewarden.storage.Op``) atomically: its
        pure twin under the lock, as the script would run on Redis."""
        reply: list[int] = self._transact(
            op.keys, lambda states, now: op.step(op.args, states, now)
        )
        return reply

    def ping(self) -> bool:
        """Always True: the state is in this process."""
        return True

    def close(self) -> None:
        """Nothing to release; present so every store closes the same way."""

    def __repr__(self) -> str:
        return (
            f"MemoryStore(clock={self.clock!r}, max_keys={self.max_keys}, prefix={self.prefix!r})"
        )


def _awaited(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """``MemoryStore``'s ``method`` as a coroutine method of ``AsyncMemoryStore`` (the same
    arguments and docstring): it runs at once, on the async store's own state."""

    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(self, *args, **kwargs)

    call.__name__ = method.__name__
    call.__qualname__ = f"AsyncMemoryStore.{method.__name__}"
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature shows its arguments
    return call


class AsyncMemoryStore(MemoryTable):
    """The asyncio face of ``MemoryStore``: its methods, awaited, over a state of its own (and
    the same C kernel for one-rate gcra and fixed_window calls with ``SPEEDUPS``). Nothing in
    it waits."""

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        """See ``MemoryStore.hit``."""
        # Written out, not made by _awaited: the hot path, with its arguments positional, as
        # the kernel takes them.
        return self._decide(algorithm, key, rates, cost)

    hit_all = _awaited(MemoryStore.hit_all)
    reset = _awaited(MemoryStore.reset)
    acquire_slot = _awaited(MemoryStore.acquire_slot)
    release_slot = _awaited(MemoryStore.release_slot)
    renew_slot = _awaited(MemoryStore.renew_slot)
    apply = _awaited(MemoryStore.apply)
    ping = _awaited(MemoryStore.ping)

    async def aclose(self) -> None:
        """Nothing to release; present so every async store closes the same way."""

    @property
    def immediate(self) -> _BlockingView | None:
        """This store's state called without ``await``: it never waits on I/O.

        ``AsyncLimiter.hit_now`` runs its flows on it, so that an in-process
        decision costs no coroutine. None for a subclass, which may override
        what the view would bypass.
        """
        if type(self) is not AsyncMemoryStore:
            return None
        return _BlockingView(self)

    def __repr__(self) -> str:
        return (
            f"AsyncMemoryStore(clock={self.clock!r}, max_keys={self.max_keys}, "
            f"prefix={self.prefix!r})"
        )


class _BlockingView:
    """An ``AsyncMemoryStore`` called through ``MemoryStore``'s methods, without ``await``
    (the same state, the same lock)."""

    __slots__ = ("_store", "hit")

    def __init__(self, store: AsyncMemoryStore) -> None:
        self._store = store
        self.hit: Callable[..., Decision] = store._decide

    @property
    def clock(self) -> Clock:
        return self._store.clock

    def __getattr__(self, name: str) -> Any:
        method = None if name.startswith("_") else getattr(MemoryStore, name, None)
        if not callable(method):
            raise AttributeError(f"the blocking view of an AsyncMemoryStore has no {name!r}")
        return MethodType(method, self._store)
