"""The memory store's C kernel (``ratewarden.storage._speedups.MemoryKernel``).

The Python path in ``storage/memory.py`` is the reference. These tests feed the
same calls to a store deciding in C and to one on the Python path only and
demand identical Decisions and identical stored state (keys, order, expiries,
evictions), check every way a call can leave the kernel, that the kernel sits
behind the store's interface (a base class, no instance patching, no
``__setattr__`` hook, no private name read). Threads, leaks and the constructor's
errors: ``test_speedups_lifecycle.py``; fixed windows, ``hit_all`` batches and the
Decision builder: ``test_speedups_fixed_window.py``, ``_batch.py``, ``_decisions.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sysconfig
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.clock import SystemClock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.storage import _kernel, memory
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock

speedups = pytest.mark.skipif(
    not memory.SPEEDUPS, reason="ratewarden.storage._speedups is not built"
)

SOURCE = Path(__file__).parents[2] / "src" / "ratewarden" / "storage" / "_speedups.c"


class PureStore(MemoryStore):
    """The same store on the Python path only (what a build without a compiler runs)."""

    hit = MemoryStore._hit


class PureAsyncStore(AsyncMemoryStore):
    """The asyncio store on the Python path only."""

    _decide = AsyncMemoryStore._hit


def test_the_kernel_is_built_wherever_a_compiler_is() -> None:
    """Where scripts/test ran (a C compiler and Python's headers present) the extension
    exists and is the stores' base, so the tests below ran against it and did not skip."""
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    if shutil.which("cc") is None or not headers.exists():
        pytest.skip("no C compiler or Python.h here: the pure path is all there is")
    if os.environ.get("RATEWARDEN_PURE", "") not in ("", "0"):
        pytest.skip("RATEWARDEN_PURE is set")
    assert memory.SPEEDUPS
    kernel = _kernel.speedups.MemoryKernel
    assert isinstance(MemoryStore(), kernel) and isinstance(AsyncMemoryStore(), kernel)


@speedups
def test_the_kernel_is_the_stores_hit_at_class_level_with_nothing_patched() -> None:
    """MemoryStore.hit is the kernel's method on the class: no instance gets a ``hit`` of its
    own, and no ``__setattr__`` hook watches the store (clock and max_keys are the kernel's)."""
    kernel = _kernel.speedups.MemoryKernel
    assert MemoryStore.hit is kernel.decide
    assert AsyncMemoryStore._decide is kernel.decide
    for store in (MemoryStore(), AsyncMemoryStore()):
        assert "hit" not in vars(store) and "_decide" not in vars(store)
        assert type(store).__setattr__ is object.__setattr__
        assert "clock" not in vars(store) and "max_keys" not in vars(store)
    limiter = Limiter(MemoryStore())
    assert limiter.plain and type(limiter.store).hit is kernel.decide


def test_the_kernel_reads_no_private_name() -> None:
    """The C source names no underscore attribute: the kernel is handed what it works on
    (``MemoryKernel.__init__``), and reads only public fields of what it was handed."""
    if not SOURCE.exists():
        pytest.skip("no source tree here")
    parts = sorted(SOURCE.parent.glob("_speedups_*.h"))
    unit = SOURCE.read_text(encoding="utf-8")
    assert len(parts) == 9 and all(f'#include "{part.name}"' in unit for part in parts)
    source = "".join(path.read_text(encoding="utf-8") for path in [SOURCE, *parts])
    assert re.findall(r'"_[A-Za-z]', re.sub(r'#include "_speedups_\w+\.h"', "", source)) == []
    assert "MemoryKernel" in source and "LimiterHit" not in source


RATES = [
    Rate.parse("3/second"),  # an emission interval of 333,333.3 us: the fraction matters
    Rate.parse("10/minute", burst=4),
    Rate(7, timedelta(milliseconds=1500)),
    Rate.parse("1/hour"),
    (Rate.parse("5/second"), Rate.parse("20/minute")),  # layered: the Python path in both
]
KEYS = ["a", "b", "user:42", "k\u00e9y"]  # the last is not ASCII: the Python path in both

step = st.tuples(
    st.integers(0, len(KEYS) - 1),
    st.integers(0, len(RATES) - 1),
    st.sampled_from([0, 1, 1, 1, 2, 3, 5, 9]),  # 0 peeks; 5 and 9 exceed some capacities
    st.sampled_from([0, 0, 1, 999, 120_000, 333_333, 1_000_000, 7_000_000, 3_600_000_001]),
)


@speedups
@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=60), max_keys=st.sampled_from([2, 3, 1000]))
def test_c_and_python_paths_decide_and_store_the_same(
    steps: list[tuple[int, int, int, int]], max_keys: int
) -> None:
    """Random calls, time steps and costs: equal Decisions after every call, equal state."""
    fast_clock, pure_clock = ManualClock(), ManualClock()
    fast = MemoryStore(clock=fast_clock, max_keys=max_keys)
    slow = PureStore(clock=pure_clock, max_keys=max_keys)
    for key_index, rate_index, cost, advance_us in steps:
        fast_clock.advance_us(advance_us)
        pure_clock.advance_us(advance_us)
        key, rates = KEYS[key_index], RATES[rate_index]
        assert fast.hit("gcra", key, rates, cost) == slow.hit("gcra", key, rates, cost)
        assert list(fast._states.items()) == list(slow._states.items())
        assert fast.evictions == slow.evictions


@speedups
def test_the_exact_numbers_of_a_worked_example() -> None:
    """3/second with burst 3: three at once, then one every 333,333.3 us, never drifting."""
    clock = ManualClock()
    limiter = Limiter(MemoryStore(clock=clock))
    rate = Rate.parse("3/second")
    assert [limiter.hit("k", rate).remaining for _ in range(3)] == [2, 1, 0]
    denied = limiter.hit("k", rate)
    assert not denied.allowed and denied.retry_after == 0.333334
    assert denied.layers[0].rate is rate and denied.degraded == "" and not denied.shadowed
    allowed = 0
    for _ in range(3_000):  # 1,000 seconds in steps of 1/3 s, rounded down to the us
        clock.advance_us(333_333)
        allowed += limiter.hit("k", rate).allowed
    assert allowed == 2_999  # 3,000 x 333,333 us is 1 us short of the 3,000th interval


@speedups
def test_every_call_form_of_limiter_hit_gives_the_python_answer() -> None:
    """Positional, keyword, cost, shadow, unusual types: each as the Python method answers."""
    rate = Rate.parse("2/minute")
    fast_clock, pure_clock = ManualClock(), ManualClock()
    fast = Limiter(MemoryStore(clock=fast_clock))
    slow = Limiter(PureStore(clock=pure_clock))
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("a", rate), {}),
        (("a",), {"rates": rate}),
        ((), {"key": "a", "rates": rate, "cost": 1}),
        (("a", rate, 1), {"shadow": False}),
        (("a", rate, 1), {"shadow": True}),
        (("a", [rate]), {}),
        (("a", (rate,)), {}),
        (("b", rate, 0), {}),
        (("b", rate, 2**70), {}),
    ]
    for args, kwargs in calls:
        assert fast.hit(*args, **kwargs) == slow.hit(*args, **kwargs), (args, kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("", Rate.parse("2/minute")), {}, ConfigurationError),
        (("a", Rate.parse("2/minute"), -1), {}, ConfigurationError),
        (("a", Rate.parse("2/minute"), True), {}, ConfigurationError),
        (("a", Rate.parse("2/minute"), 1.5), {}, ConfigurationError),
        (("a", "2/minute"), {}, ConfigurationError),
        (("a", ()), {}, ConfigurationError),
        ((b"a", Rate.parse("2/minute")), {}, ConfigurationError),
        (("a\udc80", Rate.parse("2/minute")), {}, ConfigurationError),
        (("a", Rate.parse("2/minute")), {"nope": 1}, TypeError),
        (("a",), {}, TypeError),
        (("a", Rate.parse("2/minute"), 1, False), {}, TypeError),
        (("a", Rate.parse("2/minute")), {"key": "b"}, TypeError),
    ],
)
def test_bad_calls_raise_what_the_python_path_raises_and_change_nothing(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """The kernel hands anything it does not take to the Python path, which refuses it."""
    for store in (MemoryStore(clock=ManualClock()), PureStore(clock=ManualClock())):
        limiter = Limiter(store)
        with pytest.raises(error) as raised:
            limiter.hit(*args, **kwargs)
        with pytest.raises(error) as raised_store:
            store.hit("gcra", *args, **kwargs)
        assert str(raised.value) and str(raised_store.value)
        assert len(store) == 0


@speedups
def test_store_hit_keyword_and_other_algorithms_take_the_python_path() -> None:
    """store.hit with keywords, or for another algorithm, answers as the Python method."""
    rate = Rate.parse("5/minute")
    fast, slow = MemoryStore(clock=ManualClock()), PureStore(clock=ManualClock())
    for store in (fast, slow):
        store.hit("token_bucket", "k", rate)
        store.hit(algorithm="gcra", key="k", rates=rate, cost=2)
        store.hit("gcra", "k", rate, 1)
    assert list(fast._states.items()) == list(slow._states.items())


@speedups
def test_a_new_clock_or_max_keys_is_used_from_the_next_call() -> None:
    """Setting store.clock or store.max_keys reaches the kernel (and a Limiter over it)."""
    store = MemoryStore()
    limiter = Limiter(store)
    rate = Rate.parse("1/hour")
    clock = ManualClock()
    store.clock = clock
    assert limiter.hit("k", rate).allowed
    assert not limiter.hit("k", rate).allowed
    clock.advance(3_600)
    assert limiter.hit("k", rate).allowed
    store.max_keys = 2
    for key in ("a", "b", "c"):
        limiter.hit(key, rate)
    assert len(store) == 2 and store.evictions == 2
    assert store.clock is clock and store.max_keys == 2


def test_a_max_keys_that_is_no_number_is_refused_alike_on_both_paths() -> None:
    """A max_keys set to something that is not a number is refused when set, on the kernel's
    store and the Python path's alike, and both keep their bound (it raised a TypeError from
    the comparison at the next new key)."""
    rate = Rate.parse("1/hour")
    for store in (
        MemoryStore(clock=ManualClock(), max_keys=2),
        PureStore(clock=ManualClock(), max_keys=2),
    ):
        store.hit("gcra", "a", rate)
        with pytest.raises(ConfigurationError, match="max_keys 'many' must be a whole number"):
            store.max_keys = "many"  # type: ignore[assignment]
        for key in ("b", "c"):
            assert store.hit("gcra", key, rate).allowed
        assert store.max_keys == 2 and len(store) == 2 and store.evictions == 1


@speedups
def test_the_system_clock_is_read_in_c_as_python_reads_it() -> None:
    """With the real clock, the twin's now lies between two reads of SystemClock.now_us."""
    store = MemoryStore()
    assert type(store.clock) is SystemClock
    rate = Rate.parse("1/hour")
    before = SystemClock().now_us()
    store.hit("gcra", "k", rate)
    after = SystemClock().now_us()
    (state, expires_at) = store._states["k" + store._shapes.get("gcra", rate, 1).suffixes[0]]
    assert before + 3_600_000_000 <= expires_at <= after + 3_600_000_000
    assert state[0] == expires_at and state[1] == 0


@speedups
def test_a_replaced_store_or_a_hook_or_a_subclass_keeps_its_own_hit() -> None:
    """A Limiter follows a replaced store; a hook is called; a subclass's own hit runs and
    reaches the kernel through super()."""
    rate = Rate.parse("1/hour")
    limiter = Limiter(MemoryStore(clock=ManualClock()))
    other = MemoryStore(clock=ManualClock())
    limiter.store = other
    assert limiter.hit("k", rate).allowed and len(other) == 1
    seen: list[str] = []
    hooked = Limiter(MemoryStore(), on_decision=lambda algorithm, key, d: seen.append(key))
    hooked.hit("k", rate)
    assert seen == ["k"]

    class Counting(MemoryStore):
        calls = 0

        def hit(self, *args: Any, **kwargs: Any) -> Decision:
            Counting.calls += 1
            return super().hit(*args, **kwargs)

    counting = Counting(clock=ManualClock())
    Limiter(counting).hit("k", rate)
    assert Counting.calls == 1
    assert Counting.hit is not MemoryStore.hit and MemoryStore.hit is MemoryStore._decide


@speedups
def test_threads_on_one_key_with_the_python_path_interleaved_admit_exactly_the_limit() -> None:
    """8 threads on one key, half through the kernel and half through the Python path,
    time frozen: exactly the limit is admitted."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    rate = Rate(1_000, timedelta(hours=1))
    admitted: list[int] = []
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        decide = store.hit if index % 2 else store._hit
        start.wait()
        admitted.append(sum(decide("gcra", "hot", rate).allowed for _ in range(400)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) == 1_000


@speedups
def test_the_asyncio_store_decides_in_c_too() -> None:
    """AsyncMemoryStore and AsyncLimiter (awaited, and hit_now on the blocking view): the
    same Decisions as the Python path."""
    rate = Rate.parse("3/second")

    async def run(
        store: AsyncMemoryStore, clock: ManualClock, now: Callable[..., Decision]
    ) -> list[Decision]:
        limiter = AsyncLimiter(store)
        out = []
        for i in range(20):
            clock.advance_us(100_000 * (i % 3))
            out.append(await limiter.hit(f"k{i % 2}", rate, cost=1 + i % 2))
            out.append(now("gcra", "k2", rate, 1))
        return out

    fast_clock, pure_clock = ManualClock(), ManualClock()
    fast = AsyncMemoryStore(clock=fast_clock)
    view = fast.immediate
    assert view is not None and view.hit.__name__ == "decide" and view.hit.__self__ is fast
    slow = PureAsyncStore(clock=pure_clock)
    assert asyncio.run(run(fast, fast_clock, view.hit)) == asyncio.run(
        run(slow, pure_clock, slow._hit)
    )


@speedups
def test_a_state_someone_holds_is_never_changed_under_them() -> None:
    """The kernel updates an entry in place only when the store alone holds it: entries read
    out of the store (a snapshot, a debugger) keep the values they had."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    rate = Rate.parse("10/second")
    store.hit("gcra", "k", rate)
    held = list(store._states.items())
    frozen = [(key, (tuple(state), expires)) for key, (state, expires) in held]
    clock.advance_us(1_000)
    store.hit("gcra", "k", rate)
    assert held == frozen
    assert list(store._states.items()) != frozen
    del held
    clock.advance_us(1_000)
    entry_before = store._states["k" + store._shapes.get("gcra", rate, 1).suffixes[0]]
    values = (tuple(entry_before[0]), entry_before[1])
    store.hit("gcra", "k", rate)
    assert (tuple(entry_before[0]), entry_before[1]) == values


@pytest.mark.parametrize("fast", [True, False])
def test_state_keys_of_different_kinds_never_collide(fast: bool) -> None:
    """A rate's state key is the string key + suffix; slots and budget operations keep theirs
    under (kind, key) tuples, so a crafted key equal to a rate's state key touches nothing."""
    clock = ManualClock()
    store = MemoryStore(clock=clock) if fast else PureStore(clock=clock)
    rate = Rate.parse("2/minute")
    suffix = store._shapes.get("gcra", rate, 1).suffixes[0]
    assert [store.hit("gcra", "u", rate).allowed for _ in range(3)] == [True, True, False]
    written = store._transact(["u" + suffix], lambda states, now: (states[0], [(0, 7, now + 10)]))
    assert written is None  # the operation saw no state of its own under that name
    assert not store.hit("gcra", "u", rate).allowed  # and the rate's state is untouched
    store.acquire_slot("u" + suffix, 1, "lease", 1, 1_000_000)
    assert not store.hit("gcra", "u", rate).allowed
    assert len(store) == 3


def test_a_max_keys_beyond_a_machine_word_is_accepted_as_on_the_python_path() -> None:
    """max_keys is any whole number >= 1; one too large for C is no bound, not an error."""
    store = MemoryStore(clock=ManualClock(), max_keys=10**30)
    assert store.hit("gcra", "k", Rate.parse("1/hour")).allowed
    store.max_keys = 10**40
    assert not store.hit("gcra", "k", Rate.parse("1/hour")).allowed
