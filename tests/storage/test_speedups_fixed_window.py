"""The memory store's C kernel deciding one-rate fixed_window calls (``MemoryStore.hit``).

The Python path (``_hit`` with ``algorithms.fixed_window.check``) is the reference: the
same random calls go to a store deciding in C and to one on the Python path only, and
every Decision, every stored state (keys, order, values, expiries) and the eviction count
must be equal after every call. Time moves by random amounts, more often to just
before, onto and just after the end of the current window of one of the rates, and
sometimes back (a clock set back), so a kernel that started or ended a window one
microsecond off, kept a count across a boundary either way, or expired a state at the
wrong instant gives another answer there (each of these, put in the C on purpose, fails
the property test below).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.storage import memory
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests.storage._kernel_checks import assert_no_leak

pytestmark = pytest.mark.skipif(
    not memory.SPEEDUPS, reason="ratewarden.storage._speedups is not built"
)


class PureStore(MemoryStore):
    """The same store on the Python path only."""

    hit = MemoryStore._hit


RATES: list[Rate | tuple[Rate, ...]] = [
    Rate.parse("3/second"),
    Rate.parse("10/minute"),
    Rate(7, timedelta(milliseconds=1500)),  # windows not aligned with the clock's start
    Rate(2, timedelta(microseconds=977)),  # many windows pass in a few steps
    Rate.parse("1/hour"),
    (Rate.parse("5/second"), Rate.parse("20/minute")),  # layered: the Python path in both
]
KEYS = ["a", "b", "user:42", "k\u00e9y"]  # the last is not ASCII: the Python path in both
ALGORITHMS = ["fixed_window", "fixed_window", "fixed_window", "gcra", "sliding_window"]


def period_of(rates: Rate | tuple[Rate, ...]) -> int:
    return (rates[0] if isinstance(rates, tuple) else rates).period_us


# (key, rates, algorithm, cost, how time moves, by how much)
step = st.tuples(
    st.sampled_from([0, 0, 0, 1, 2, 3]),  # mostly one key, so that calls meet its state
    st.sampled_from([0, 0, 1, 2, 3, 3, 4, 5]),
    st.integers(0, len(ALGORITHMS) - 1),
    st.sampled_from([0, 1, 1, 1, 2, 3, 7, 11]),  # 0 peeks; 7 and 11 exceed some limits
    st.sampled_from(["by", "to_end", "to_end", "to_end", "back"]),
    st.one_of(
        st.sampled_from([0, 1, 999, 333_333, 1_000_000, 60_000_000, 3_600_000_001]),
        st.integers(-1, 1),  # with "to_end": just before, onto, just after the window's end
    ),
)


def advance(clocks: tuple[ManualClock, ManualClock], how: str, amount: int, period: int) -> None:
    if how == "back":  # a clock set back: a live state then holds a later window than now's
        for clock in clocks:
            clock.set((clock.now_us() - 1_000 * (abs(amount) % 2_000)) / 1_000_000)
        return
    if how == "to_end":
        now = clocks[0].now_us()
        amount = period - now % period + amount if amount in (-1, 0, 1) else amount
    for clock in clocks:
        amount = max(amount, 0)
        clock.advance_us(amount)


@settings(max_examples=400, deadline=None)
@given(steps=st.lists(step, min_size=2, max_size=80), max_keys=st.sampled_from([2, 3, 1000]))
def test_c_and_python_decide_fixed_windows_and_store_the_same(
    steps: list[tuple[int, int, int, int, str, int]], max_keys: int
) -> None:
    """Random calls, costs and clock steps across window ends: equal Decisions after every
    call, equal state (order and expiries included) and equal evictions."""
    clocks = (ManualClock(), ManualClock())
    fast = MemoryStore(clock=clocks[0], max_keys=max_keys)
    slow = PureStore(clock=clocks[1], max_keys=max_keys)
    for key_index, rate_index, algorithm_index, cost, how, amount in steps:
        key, rates = KEYS[key_index], RATES[rate_index]
        advance(clocks, how, amount, period_of(rates))
        algorithm = ALGORITHMS[algorithm_index]
        assert fast.hit(algorithm, key, rates, cost) == slow.hit(algorithm, key, rates, cost)
        assert list(fast._states.items()) == list(slow._states.items())
        assert fast.evictions == slow.evictions


def test_the_window_boundary_in_exact_numbers() -> None:
    """3/second: the count ends exactly at the window's end (not a microsecond before or
    after), and the state expires there; a Decision says so in its reset and retry."""
    clock = ManualClock()  # 1,700,000,000 s: a window of one second starts here
    store = MemoryStore(clock=clock)
    rate = Rate.parse("3/second")
    suffix = store._shapes.get("fixed_window", rate, 1).suffixes[0]
    clock.advance_us(250_000)
    assert [store.hit("fixed_window", "k", rate).remaining for _ in range(3)] == [2, 1, 0]
    window = clock.now_us() // 1_000_000
    assert store._states["k" + suffix] == ((window, 3), (window + 1) * 1_000_000)
    denied = store.hit("fixed_window", "k", rate)
    assert not denied.allowed and denied.retry_after == 0.75 and denied.reset_after == 0.75
    assert denied.layers == (denied.layers[0],) and denied.layers[0].layers == ()
    clock.advance_us(749_999)  # the window's last microsecond
    last = store.hit("fixed_window", "k", rate)
    assert not last.allowed and last.retry_after == 0.000001
    clock.advance_us(1)  # the next window: a new count
    fresh = store.hit("fixed_window", "k", rate, 2)
    assert fresh.allowed and fresh.remaining == 1 and fresh.reset_after == 1.0
    assert store._states["k" + suffix] == ((window + 1, 2), (window + 2) * 1_000_000)
    never = store.hit("fixed_window", "k", rate, 4)
    assert not never.allowed and never.retry_after == float("inf") and never.remaining == 1


@pytest.mark.parametrize("cost", [0, 4])
def test_at_the_instant_a_state_expires_a_call_that_writes_nothing_drops_it(cost: int) -> None:
    """A peek, or a call beyond the limit, at the end of the window drops the ended window's
    state on both paths (the state is expired at its expiry, not a microsecond later)."""
    rate = Rate.parse("3/second")
    tables = []
    for store in (MemoryStore(clock=ManualClock()), PureStore(clock=ManualClock())):
        store.hit("fixed_window", "k", rate, 2)
        store.clock.advance_us(999_999)  # type: ignore[attr-defined]
        assert store.hit("fixed_window", "k", rate, cost).remaining == 1
        assert len(store) == 1
        store.clock.advance_us(1)  # type: ignore[attr-defined]
        assert store.hit("fixed_window", "k", rate, cost).remaining == 3
        tables.append(list(store._states.items()))
    assert tables == [[], []]


def test_bad_fixed_window_calls_raise_what_the_python_path_raises() -> None:
    """A rate with a separate burst has no fixed window: both paths refuse it alike."""
    messages = []
    for store in (MemoryStore(clock=ManualClock()), PureStore(clock=ManualClock())):
        with pytest.raises(ConfigurationError) as raised:
            store.hit("fixed_window", "k", Rate.parse("10/minute", burst=4))
        messages.append(str(raised.value))
        assert len(store) == 0
    assert messages[0] == messages[1]


def test_a_state_held_elsewhere_or_out_of_range_goes_to_the_python_path() -> None:
    """A snapshot of an entry keeps its values; a count beyond the limit (admitted under a
    higher one: the key holds no limit) is decided as the Python path decides it, nothing
    remaining; a count beyond any limit the kernel takes, or a clock before the epoch, is
    decided by the Python path, with its answer."""
    clock = ManualClock()
    store, pure = MemoryStore(clock=clock), PureStore(clock=clock)
    rate = Rate.parse("5/minute")
    suffix = store._shapes.get("fixed_window", rate, 1).suffixes[0]
    store.hit("fixed_window", "k", rate)
    held = store._states["k" + suffix]
    store.hit("fixed_window", "k", rate)
    assert held[0][1] == 1 and store._states["k" + suffix][0][1] == 2
    for each in (store, pure):
        window = clock.now_us() // 60_000_000
        each._states["k" + suffix] = ((window, 9), (window + 1) * 60_000_000)
    assert store.hit("fixed_window", "k", rate) == pure.hit("fixed_window", "k", rate)
    assert store.hit("fixed_window", "k", rate).remaining == 0
    for each in (store, pure):
        window = clock.now_us() // 60_000_000
        each._states["k" + suffix] = ((window, 2**50), (window + 1) * 60_000_000)
    assert store.hit("fixed_window", "k", rate) == pure.hit("fixed_window", "k", rate)
    clock._now_us = -90_000_000  # a clock before the epoch (ManualClock.set refuses one)
    assert store.hit("fixed_window", "n", rate) == pure.hit("fixed_window", "n", rate)
    assert list(store._states.items()) == list(pure._states.items())


def test_limiters_sync_and_async_decide_fixed_windows_in_c_alike() -> None:
    """Limiter and AsyncLimiter (awaited, and hit_now on the blocking view) with
    algorithm="fixed_window": the same Decisions as the Python path."""
    rate = Rate.parse("4/second")

    async def run(store: AsyncMemoryStore, clock: ManualClock, pure: bool) -> list[object]:
        limiter = AsyncLimiter(store, algorithm="fixed_window")
        now = limiter.hit_now
        assert (now is None) == pure  # a subclass has no blocking view
        out: list[object] = []
        for i in range(30):
            clock.advance_us(150_000 * (i % 3))
            out.append(await limiter.hit(f"k{i % 2}", rate, cost=1 + i % 2))
            out.append(store._hit("fixed_window", "k2", rate) if now is None else now("k2", rate))
        return out

    class PureAsync(AsyncMemoryStore):
        _decide = AsyncMemoryStore._hit

    fast_clock, pure_clock = ManualClock(), ManualClock()
    assert asyncio.run(run(AsyncMemoryStore(clock=fast_clock), fast_clock, False)) == asyncio.run(
        run(PureAsync(clock=pure_clock), pure_clock, True)
    )
    clocks = (ManualClock(), ManualClock())
    sync = [Limiter(MemoryStore(clock=clocks[0]), algorithm="fixed_window")]
    sync.append(Limiter(PureStore(clock=clocks[1]), algorithm="fixed_window"))
    for i in range(40):
        for clock in clocks:
            clock.advance_us(97_000)
        assert sync[0].hit("u", rate, i % 3) == sync[1].hit("u", rate, i % 3)


def test_fixed_window_calls_leak_nothing() -> None:
    """20,000 rounds of fixed_window calls (allowed, denied, peeks, new keys with sweeps and
    evictions, expired states written over, the Python path): no block is left behind."""
    clock = ManualClock()
    store = MemoryStore(clock=clock, max_keys=3)
    rate, layered = Rate.parse("5/second"), (Rate.parse("5/second"), Rate.parse("9/minute"))
    keys = [f"user:{i}" for i in range(5)]

    def round_of_calls(i: int) -> None:
        clock.advance_us(130_000)
        store.hit("fixed_window", keys[i % 5], rate)  # a new key, a sweep, an eviction
        store.hit("fixed_window", keys[i % 5], rate, 2)  # in place
        store.hit("fixed_window", keys[i % 5], rate, 9)  # beyond the limit: denied in C
        store.hit("fixed_window", keys[i % 5], rate, 0)  # a peek
        store.hit("fixed_window", "k\u00e9y", rate)  # not ASCII: the Python path
        store.hit("fixed_window", "layered", layered)  # two rates: the Python path

    assert_no_leak(round_of_calls)
