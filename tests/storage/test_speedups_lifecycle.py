"""The memory store's C kernel: threads, what it holds and frees, and what it is handed.

Split from ``test_speedups.py`` (which compares its decisions with the Python path's):
threads switching mid-call with different rates, its memory over many calls of every
kind, that a dropped store is freed, and the errors of ``MemoryKernel``'s constructor.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import OrderedDict
from datetime import timedelta
from typing import Any

import pytest

from ratewarden import Limiter, Rate
from ratewarden.clock import SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.storage import _kernel, memory
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests.storage._kernel_checks import assert_no_leak, run_racing

speedups = pytest.mark.skipif(
    not memory.SPEEDUPS, reason="ratewarden.storage._speedups is not built"
)


@speedups
def test_threads_with_different_rates_each_get_their_own_rate() -> None:
    """The kernel keeps the last call shape; a thread switch mid-call (a Python clock, a
    collection) must not hand one thread another thread's rate, limit or key suffix."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    limiter = Limiter(store)
    rates = [Rate(limit, timedelta(hours=1)) for limit in (50, 70, 90, 110)]
    problems: list[str] = []
    start = threading.Barrier(len(rates))

    def worker(rate: Rate) -> None:
        start.wait()
        allowed = 0
        for _ in range(3 * rate.limit):
            decision = limiter.hit(f"key-{rate.limit}", rate)
            allowed += decision.allowed
            if decision.rate is not rate or decision.limit != rate.limit:
                problems.append(f"{rate.limit}: got {decision.limit}")
        if allowed != rate.limit:
            problems.append(f"{rate.limit}: {allowed} allowed")

    run_racing(worker, [(rate,) for rate in rates])
    assert problems == []


@speedups
def test_the_kernel_leaks_nothing_on_any_path() -> None:
    """20,000 rounds of every kind of call (allowed and denied in C, in-place updates, new keys
    with sweeps and evictions, each way of handing a call to the Python path, errors): the
    number of allocated blocks stays where it was; a leak of one object per call would add
    20,000 or more."""
    clock = ManualClock()
    store = MemoryStore(clock=clock, max_keys=3)
    limiter = Limiter(store)
    rate, small, layered = Rate.parse("5/second"), Rate.parse("1/hour"), Rate.parse("2/minute")
    both = (rate, layered)
    keys = [f"user:{i}" for i in range(5)]

    def round_of_calls(i: int) -> None:
        clock.advance_us(50_000)
        store.hit("gcra", keys[i % 5], rate)  # a new key, a sweep, an eviction (max_keys=3)
        store.hit("gcra", keys[i % 5], rate, 2)  # in place
        store.hit("gcra", keys[i % 5], small, 9)  # over capacity: denied in C
        limiter.hit(keys[i % 5], rate, 0)  # a peek
        store.hit("gcra", "k\u00e9y", rate)  # not ASCII: the Python path
        store.hit(algorithm="gcra", key="kw", rates=rate)  # keywords: the Python path
        store.hit("gcra", "layered", both)  # two rates: the Python path
        store.hit("token_bucket", "tb", rate)  # another algorithm: the Python path
        with pytest.raises(ConfigurationError):
            store.hit("gcra", "bad", rate, -1)  # refused by the Python path
        with pytest.raises(TypeError):
            store.hit("gcra", "k", rate, 1, 2)  # too many arguments, said by the Python path

    assert_no_leak(round_of_calls)


@speedups
def test_a_dropped_store_is_freed() -> None:
    """The kernel holds what it was handed (the store's dict, lock, shape cache, methods), and
    the collector still frees a store nothing else holds, with a cycle through it or not."""
    store = MemoryStore(clock=ManualClock())
    store.hit("gcra", "k", Rate.parse("1/hour"))
    gone = weakref.ref(store)
    del store
    gc.collect()
    assert gone() is None
    cyclic = AsyncMemoryStore(clock=ManualClock())
    cyclic.itself = cyclic  # type: ignore[attr-defined]
    gone = weakref.ref(cyclic)
    del cyclic
    gc.collect()
    assert gone() is None


@speedups
def test_the_kernel_says_what_is_wrong_with_what_it_is_handed() -> None:
    """MemoryKernel's constructor takes every object by keyword and names a bad one; a kernel
    never set up refuses to decide rather than crash."""
    kernel = _kernel.speedups.MemoryKernel
    handed: dict[str, Any] = {
        "states": OrderedDict(),
        "lock": threading.Lock(),
        "shapes": memory._plan.Shapes(),
        "fallback": MemoryStore._hit,
        "batch_fallback": MemoryStore._hit_all_single,
        "evict": MemoryStore._evict,
        "decision_type": Decision,
        "rate_type": Rate,
        "system_clock_type": SystemClock,
    }
    kernel(**handed)
    with pytest.raises(TypeError, match="exactly these keyword arguments"):
        kernel(**{name: value for name, value in handed.items() if name != "lock"})
    with pytest.raises(TypeError, match=r"states=\.\.\.\) must be an OrderedDict, not dict"):
        kernel(**{**handed, "states": {}})
    with pytest.raises(TypeError, match=r"lock=\.\.\.\): <object object at \w+> has no acquire"):
        kernel(**{**handed, "lock": object()})
    with pytest.raises(TypeError, match="has no object slot allowed"):
        kernel(**{**handed, "decision_type": Rate})
    with pytest.raises(RuntimeError, match="not set up"):
        kernel.__new__(kernel).decide("gcra", "k", Rate.parse("1/hour"))
    with pytest.raises(RuntimeError, match="not set up"):
        kernel.__new__(kernel).decide_all([])
