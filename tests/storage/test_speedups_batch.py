"""The memory store's C kernel deciding one-rate ``hit_all`` batches (``decide_all``).

``_hit_all_single`` (and the layered path of ``hit_all``) is the reference: the same random
batches, with single calls between them, go to a store deciding in C and to one on the
Python path only, and the Decisions, the errors, every stored state (keys, order, values,
expiries) and the eviction count must be equal after every step. The batches are gcra or
fixed_window, often denied (costs beyond what is left), sometimes with a call the kernel
does not take (a non-ASCII key, another algorithm, several rates) or refused by the
validation (a repeated key and rate), and time moves across window ends.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.storage import _kernel, memory
from ratewarden.storage._memory_table import MemoryTable
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests.storage._kernel_checks import assert_no_leak, run_racing

pytestmark = pytest.mark.skipif(
    not memory.SPEEDUPS, reason="ratewarden.storage._speedups is not built"
)


class PureStore(MemoryStore):
    """The same store on the Python path only."""

    hit = MemoryStore._hit
    _decide_all = MemoryTable._hit_all_single

    def decide_calls(self, algorithm: str, calls: object) -> None:
        return None  # hit_all then validates in Python, as a build without the kernel does


RATES: list[Rate | tuple[Rate, ...] | list[Rate]] = [
    Rate.parse("3/second"),
    [Rate.parse("4/second")],  # a list: looked up by value each time
    Rate.parse("10/minute"),
    Rate(7, timedelta(milliseconds=1500)),
    Rate(2, timedelta(microseconds=977)),
    (Rate.parse("5/second"), Rate.parse("20/minute")),  # layered: the Python path in both
]
KEYS = ["a", "a", "b", "user:42", "k\u00e9y"]  # the last is not ASCII: the Python path
ALGORITHMS = ["fixed_window", "fixed_window", "gcra", "gcra", "token_bucket"]

call = st.tuples(
    st.integers(0, len(KEYS) - 1),
    st.sampled_from([0, 0, 1, 2, 3, 4, 5]),
    st.sampled_from([0, 1, 1, 1, 2, 3, 8]),  # 8 is beyond every limit here: a denied batch
)
# (algorithm, the batch's calls, how time moves, by how much, a single hit after it or not)
step = st.tuples(
    st.integers(0, len(ALGORITHMS) - 1),
    st.lists(call, min_size=0, max_size=5),
    st.sampled_from(["by", "to_end", "to_end"]),
    st.one_of(st.sampled_from([0, 1, 999, 333_333, 1_000_000, 61_000_000]), st.integers(-1, 1)),
    st.booleans(),
)


def period_of(rates: Rate | tuple[Rate, ...] | list[Rate]) -> int:
    return rates.period_us if isinstance(rates, Rate) else rates[0].period_us


def outcome(store: MemoryStore, algorithm: str, calls: list[Any]) -> object:
    """The batch's Decisions, or the text of the error it raised."""
    try:
        return store.hit_all(algorithm, calls)
    except ConfigurationError as error:
        return str(error)


@settings(max_examples=400, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=40), max_keys=st.sampled_from([2, 3, 1000]))
def test_c_and_python_decide_batches_and_store_the_same(
    steps: list[tuple[int, list[tuple[int, int, int]], str, int, bool]], max_keys: int
) -> None:
    """Random batches, single calls between them and clock steps across window ends: equal
    Decisions (or equal errors), equal state and equal evictions after every step."""
    clocks = (ManualClock(), ManualClock())
    fast = MemoryStore(clock=clocks[0], max_keys=max_keys)
    slow = PureStore(clock=clocks[1], max_keys=max_keys)
    for algorithm_index, picked, how, by, single in steps:
        algorithm = ALGORITHMS[algorithm_index]
        calls = [(KEYS[k], RATES[r], cost) for k, r, cost in picked]
        amount = by
        if how == "to_end" and calls and by in (-1, 0, 1):
            period = period_of(calls[0][1])
            amount = period - clocks[0].now_us() % period + by
        for clock in clocks:
            clock.advance_us(max(amount, 0))
        assert outcome(fast, algorithm, calls) == outcome(slow, algorithm, calls)
        if single and calls:
            key, rates, cost = calls[-1]
            assert fast.hit(algorithm, key, rates, cost) == slow.hit(algorithm, key, rates, cost)
        assert list(fast._states.items()) == list(slow._states.items())
        assert fast.evictions == slow.evictions


@pytest.mark.parametrize("algorithm", ["gcra", "fixed_window"])
def test_a_denied_batch_writes_nothing_and_reports_the_others_at_cost_0(algorithm: str) -> None:
    """All or nothing: one call over its limit denies the batch; the others are reported as
    the check they became (allowed, cost 0, what is left), and no state changes."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    small, big = Rate.parse("2/minute"), Rate.parse("100/minute")
    assert all(d.allowed for d in store.hit_all(algorithm, [("a", small, 2), ("b", big, 5)]))
    before = list(store._states.items())
    snapshot = [(key, (tuple(state), expires)) for key, (state, expires) in before]
    over, other = store.hit_all(algorithm, [("a", small, 1), ("b", big, 5)])
    assert not over.allowed and over.cost == 1 and over.remaining == 0
    assert other.allowed and other.cost == 0 and other.remaining == 95
    assert other.layers[0].cost == 0 and other.layers[0].remaining == 95
    assert [(key, (tuple(state), expires)) for key, (state, expires) in store._states.items()] == (
        snapshot
    )
    assert store.hit_all(algorithm, []) == []


def test_the_batch_is_the_kernels_and_other_batches_go_to_the_python_path() -> None:
    """hit_all reaches the kernel's decide_all; a batch it does not take (another algorithm,
    a non-ASCII key) answers as the Python path, a layered one is the layered path."""
    kernel = _kernel.speedups.MemoryKernel
    assert MemoryStore.decide_calls is kernel.decide_calls
    assert MemoryStore._decide_all is kernel.decide_all
    assert AsyncMemoryStore._decide_all is kernel.decide_all
    rate = Rate.parse("5/minute")
    batches: list[tuple[str, list[Any]]] = [
        ("token_bucket", [("a", rate, 1), ("b", rate, 2)]),
        ("gcra", [("a", rate, 1), ("k\u00e9y", rate, 2)]),
        ("fixed_window", [("a", rate, 1), ("b", (rate, Rate.parse("9/hour")), 2)]),
        ("gcra", ("a", rate, 1)),  # not a list: refused by the validation
        ("gcra", [("a", rate, 1), ("a", rate, 2)]),  # the same key and rate twice: refused
        ("fixed_window", [("a", rate, -1)]),
        ("fixed_window", [("a", rate, True)]),
        ("fixed_window", [("a", "5/minute", 1)]),
        ("fixed_window", [("a", rate, 1), ["b", rate, 1]]),
        ("fixed_window", [("a", rate, 1), ("b", rate)]),
        ("fixed_window", [("a", rate, 1), (b"b", rate, 1)]),
        ("fixed_window", [("a", rate, 1), ("", rate, 1)]),
        ("fixed_window", [("a", Rate.parse("5/minute", burst=9), 1)]),
        ("fixed_window", [(f"k{i}", rate, 1) for i in range(70)]),  # more than the kernel takes
        ("nope", [("a", rate, 1)]),
    ]
    fast, slow = MemoryStore(clock=ManualClock()), PureStore(clock=ManualClock())
    for algorithm, calls in batches:
        assert outcome(fast, algorithm, calls) == outcome(slow, algorithm, calls)
        assert list(fast._states.items()) == list(slow._states.items())


def test_many_rates_and_costs_through_the_kernels_shape_cache_answer_alike() -> None:
    """More distinct rates and costs than the kernel keeps shapes for, in turn, and a list of
    rates changed between two batches: each call has its own rate's answer."""
    rates = [Rate(limit, timedelta(seconds=10)) for limit in range(1, 41)]
    listed = [Rate.parse("5/second")]
    fast, slow = MemoryStore(clock=ManualClock()), PureStore(clock=ManualClock())
    for round_ in range(3):
        for i, rate in enumerate(rates):
            calls = [(f"k{i}", rate, round_ % 2), (f"j{i}", rates[-1 - i], 1), ("l", listed, 1)]
            assert fast.hit_all("fixed_window", calls) == slow.hit_all("fixed_window", calls)
            listed[0] = Rate(i + 1, timedelta(seconds=1))
    assert list(fast._states.items()) == list(slow._states.items())


def test_an_eviction_in_the_middle_of_a_batch_runs_under_the_stores_lock() -> None:
    """The store's evict (Python) runs between two writes of a batch; the kernel holds the
    store's lock meanwhile, so no other thread decides on the state half written."""
    held: list[bool] = []

    class Watching(MemoryStore):
        def _evict(self) -> None:
            held.append(self._lock.locked())
            super()._evict()

    store = Watching(clock=ManualClock(), max_keys=2)
    rate = Rate.parse("5/minute")
    store.hit_all("fixed_window", [("a", rate, 1), ("b", rate, 1), ("c", rate, 1)])
    assert held == [True] and store.evictions == 1 and not store._lock.locked()


def test_threads_deciding_batches_and_single_calls_on_one_key_admit_exactly_the_limit() -> None:
    """8 threads on one hot key, half through decide_all (with a key of their own beside it),
    half through hit: exactly the limit is admitted, time frozen."""
    store = MemoryStore(clock=ManualClock())
    rate = Rate(1_000, timedelta(hours=1))
    admitted: list[int] = []
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        start.wait()
        allowed = 0
        for i in range(400):
            if index % 2:
                calls = [("hot", rate, 1), (f"own-{index}-{i}", rate, 1)]
                allowed += store.hit_all("fixed_window", calls)[0].allowed
            else:
                allowed += store.hit("fixed_window", "hot", rate).allowed
        admitted.append(allowed)

    run_racing(worker, [(i,) for i in range(8)])
    assert sum(admitted) == 1_000


def test_the_asyncio_store_and_its_blocking_view_batch_in_c_alike() -> None:
    """AsyncMemoryStore.hit_all (awaited) and its blocking view: the Python path's answers."""
    rate, other = Rate.parse("3/second"), Rate.parse("4/second")

    class PureAsync(AsyncMemoryStore):
        _decide_all = MemoryTable._hit_all_single

    async def run(store: AsyncMemoryStore, clock: ManualClock) -> list[object]:
        out: list[object] = []
        for i in range(30):
            clock.advance_us(170_000 * (i % 3))
            out.append(await store.hit_all("fixed_window", [("a", rate, 1), ("b", other, i % 3)]))
            out.append(await store.hit_all("gcra", [("a", rate, 2), ("c", other, 1)]))
        return out

    fast_clock, pure_clock = ManualClock(), ManualClock()
    fast = AsyncMemoryStore(clock=fast_clock)
    assert asyncio.run(run(fast, fast_clock)) == asyncio.run(
        run(PureAsync(clock=pure_clock), pure_clock)
    )
    view = fast.immediate
    assert view is not None
    assert view.hit_all("fixed_window", [("z", rate, 1)])[0].remaining == 2


def test_batches_leak_nothing() -> None:
    """20,000 rounds of batches (admitted, denied, with sweeps and evictions, handed to the
    Python path, refused): no block is left behind."""
    clock = ManualClock()
    store = MemoryStore(clock=clock, max_keys=4)
    rate, other = Rate.parse("5/second"), Rate.parse("50/minute")
    keys = [f"user:{i}" for i in range(6)]

    def round_of_calls(i: int) -> None:
        clock.advance_us(130_000)
        key, nxt = keys[i % 6], keys[(i + 1) % 6]
        store.hit_all("fixed_window", [(key, rate, 1), (nxt, other, 2)])  # new keys, evictions
        store.hit_all("gcra", [(key, rate, 1), (nxt, other, 1)])
        store.hit_all("fixed_window", [(key, rate, 9), (nxt, other, 1)])  # denied
        store.hit_all("fixed_window", [(key, rate, 1), ("k\u00e9y", other, 1)])  # Python path
        with pytest.raises(ConfigurationError):
            store.hit_all("gcra", [(key, rate, 1), (key, rate, 1)])

    assert_no_leak(round_of_calls)
