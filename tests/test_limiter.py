"""Limiter and AsyncLimiter on the memory store: API behaviour that holds for every algorithm."""

from __future__ import annotations

import inspect
import math
import threading
from typing import Any

import pytest

from ratewarden import (
    AsyncLimiter,
    AsyncMemoryStore,
    ConfigurationError,
    Decision,
    Limiter,
    MemoryStore,
    Rate,
)
from ratewarden.algorithms import ALGORITHMS
from ratewarden.testing import DecisionRecorder, ManualClock

ALL = sorted(ALGORITHMS)


def make(algorithm: str = "gcra", **store_options: Any) -> tuple[Limiter, ManualClock]:
    clock = ManualClock()
    return Limiter(MemoryStore(clock=clock, **store_options), algorithm=algorithm), clock


@pytest.mark.parametrize("algorithm", ALL)
@pytest.mark.parametrize(
    ("key", "cost"),
    [("", 1), (None, 1), (b"k", 1), ("k", -1), ("k", 1.0), ("k", True), ("k", "1")],
)
def test_bad_key_or_cost_raises_and_changes_nothing(algorithm: str, key: Any, cost: Any) -> None:
    """Empty or non-string keys and negative or non-integer costs are refused before any write."""
    limiter, _ = make(algorithm)
    rate = Rate.parse("5/minute")
    before = limiter.hit("other", rate)
    with pytest.raises(ConfigurationError):
        limiter.hit(key, rate, cost)
    assert len(limiter.store) == 1  # type: ignore[arg-type]
    assert limiter.peek("other", rate).remaining == before.remaining


@pytest.mark.parametrize(
    "rates", [[], ["100/minute"], [Rate.parse("1/s"), Rate.parse("1/s")], None]
)
def test_bad_rates_raise(rates: Any) -> None:
    """No rate, a string instead of a Rate, or the same rate twice are errors naming the problem."""
    limiter, _ = make()
    with pytest.raises(ConfigurationError):
        limiter.hit("k", rates)


def test_unknown_algorithm_lists_the_choices() -> None:
    """Limiter(algorithm=...) rejects unknown names and says which exist."""
    with pytest.raises(ConfigurationError, match="gcra"):
        Limiter(algorithm="moving_window")


@pytest.mark.parametrize("algorithm", ALL)
def test_layered_rates_are_all_or_nothing(algorithm: str) -> None:
    """A request denied by one layer consumes nothing from the layers that would allow it."""
    limiter, _ = make(algorithm)
    tight, loose = Rate.parse("2/minute"), Rate.parse("100/hour")
    assert limiter.hit("k", [tight, loose]).allowed
    assert limiter.hit("k", [tight, loose]).allowed
    for _ in range(5):
        denied = limiter.hit("k", [tight, loose])
        assert not denied.allowed
        assert denied.rate == tight
    assert limiter.peek("k", loose).remaining == 98
    layers = limiter.peek("k", [tight, loose]).layers
    assert [layer.remaining for layer in layers] == [0, 98]


@pytest.mark.parametrize("algorithm", ALL)
def test_peek_consumes_nothing_and_reset_forgets(algorithm: str) -> None:
    """peek is a hit of cost 0; reset brings the key back to full capacity."""
    limiter, _ = make(algorithm)
    rate = Rate.parse("3/minute")
    limiter.hit("k", rate)
    assert limiter.peek("k", rate).remaining == 2
    assert limiter.peek("k", rate).remaining == 2
    limiter.reset("k", rate)
    assert limiter.peek("k", rate).remaining == 3


@pytest.mark.parametrize("algorithm", ALL)
def test_shadow_mode_allows_counts_and_consumes_nothing(algorithm: str) -> None:
    """shadow=True reports a would-be denial as allowed and shadowed; the hook still sees it."""
    seen: list[Decision] = []
    clock = ManualClock()
    limiter = Limiter(
        MemoryStore(clock=clock), algorithm, on_decision=lambda _a, _k, d: seen.append(d)
    )
    rate = Rate.parse("1/minute")
    assert limiter.hit("k", rate, shadow=True).allowed
    shadowed = limiter.hit("k", rate, shadow=True)
    assert shadowed.allowed and shadowed.shadowed
    assert [d.shadowed for d in seen] == [False, True]
    assert not limiter.hit("k", rate).allowed


def test_acquire_waits_on_the_clock_then_returns_the_allowing_decision() -> None:
    """acquire sleeps retry_after on the store's clock (a ManualClock advances) until allowed."""
    limiter, clock = make()
    rate = Rate.parse("1/second")
    start = clock.now()
    for _ in range(3):
        assert limiter.acquire("k", rate).allowed
    assert clock.now() - start == pytest.approx(2.0)


def test_acquire_gives_up_at_timeout_or_when_never_possible() -> None:
    """A wait longer than timeout returns the denial at once; so does a cost above capacity."""
    limiter, clock = make()
    rate = Rate.parse("1/minute")
    limiter.hit("k", rate)
    start = clock.now()
    denied = limiter.acquire("k", rate, timeout=5)
    assert not denied.allowed and clock.now() == start
    never = limiter.acquire("k", rate, cost=2)
    assert not never.allowed and math.isinf(never.retry_after)
    with pytest.raises(ConfigurationError):
        limiter.acquire("k", rate, timeout=-1)


def test_memory_store_forgets_keys_after_their_ttl() -> None:
    """A key's state expires once it is back to full capacity (a read sees nothing there);
    a second later the sweeps that new keys make drop it, so idle keys cost nothing."""
    limiter, clock = make()
    rate = Rate.parse("10/minute")
    limiter.hit("a", rate)
    assert len(limiter.store) == 1  # type: ignore[arg-type]
    clock.advance(6.0)  # one emission interval: GCRA is full again
    limiter.hit("b", rate)
    assert len(limiter.store) == 2  # type: ignore[arg-type]  # "a": expired, kept a second
    clock.advance(1.0)
    limiter.hit("c", rate)
    limiter.hit("d", rate)
    assert sorted(k.split(":")[0] for k in limiter.store._states) == ["b", "c", "d"]  # type: ignore[attr-defined]
    assert limiter.peek("a", rate).remaining == 10


@pytest.mark.parametrize("pure", [False, True], ids=["as-built", "pure-python"])
def test_memory_store_stays_small_under_a_stream_of_new_keys(pure: bool) -> None:
    """100 new keys a second for 100 s beside one key hit all along (it never expires and
    keeps coming back to the oldest end): the store holds at most twice the keys written
    in the last TTL + 1 s (2 x 100/s x 7 s, see docs/storage.md), never the 10,000 seen."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    hit = store._hit if pure else store.hit
    rate = Rate.parse("10/minute")  # one hit lives 6 s
    hot = Rate.parse("1000/second")
    sizes = []
    for i in range(10_000):
        clock.advance(0.01)
        hit("gcra", "hot", hot, 1)
        hit("gcra", f"user:{i}", rate, 1)
        sizes.append(len(store))
    assert max(sizes) <= 2 * 700 + 1
    assert sizes[-1] >= 600


def test_memory_store_is_bounded() -> None:
    """Past max_keys the least recently written key is evicted and counted."""
    limiter, _ = make(max_keys=100)
    rate = Rate.parse("10/minute")
    for i in range(250):
        limiter.hit(f"user:{i}", rate)
    store = limiter.store
    assert len(store) == 100  # type: ignore[arg-type]
    assert store.evictions == 150  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError):
        MemoryStore(max_keys=0)


@pytest.mark.parametrize("algorithm", ALL)
def test_threads_hammering_one_key_admit_exactly_the_limit(algorithm: str) -> None:
    """8 threads x 50 hits on a 100/minute key (frozen clock) admit exactly 100."""
    limiter, _ = make(algorithm)
    rate = Rate.parse("100/minute")
    admitted = []

    def worker() -> None:
        admitted.append(sum(limiter.hit("hot", rate).allowed for _ in range(50)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) == 100


async def test_async_limiter_is_the_same_state_machine() -> None:
    """AsyncLimiter over AsyncMemoryStore gives the GCRA worked example and acquires slots."""
    clock = ManualClock()
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    rate = Rate.parse("100/minute", burst=20)
    decisions = [await limiter.hit("k", rate) for _ in range(21)]
    assert sum(d.allowed for d in decisions) == 20
    assert decisions[-1].retry_after == 0.6
    assert (await limiter.acquire("k", rate)).allowed
    assert clock.now() == pytest.approx(1_700_000_000.6)
    async with limiter.slot("gpu", 1) as lease:
        assert lease.allowed
        assert not (await limiter.acquire_slot("gpu", 1)).allowed
    assert (await limiter.acquire_slot("gpu", 1)).allowed


@pytest.mark.parametrize("algorithm", ALL)
@pytest.mark.parametrize("hooked", [False, True])
async def test_async_hit_now_is_hit_without_the_await(algorithm: str, hooked: bool) -> None:
    """``hit_now`` (the asyncio middleware's path over an in-process store) gives ``hit``'s
    decisions call for call, shadow calls and the decision hook included."""
    sides = []
    for _ in range(2):
        clock = ManualClock()
        recorder = DecisionRecorder()
        limiter = AsyncLimiter(
            AsyncMemoryStore(clock=clock), algorithm, on_decision=recorder if hooked else None
        )
        sides.append((limiter, clock, recorder))
    now = sides[0][0].hit_now
    assert now is not None
    rates = [Rate.parse("3/second"), (Rate.parse("2/second"), Rate.parse("5/minute"))]
    for step in range(40):
        key, rate, cost, shadow = f"k{step % 3}", rates[step % 2], 1 + step % 2, step % 5 == 0
        expected = await sides[1][0].hit(key, rate, cost, shadow=shadow)
        assert now(key, rate, cost, shadow=shadow) == expected
        for _, clock, _ in sides:
            clock.advance(0.05 * (step % 4))
    assert sides[0][2].records == sides[1][2].records


def test_hit_now_only_where_the_store_is_in_process() -> None:
    """A store doing I/O (or any store subclass) has no ``hit_now``; replacing the store
    sets it again."""

    class Elsewhere(AsyncMemoryStore):
        pass

    limiter = AsyncLimiter(Elsewhere())
    assert limiter.hit_now is None
    limiter.store = AsyncMemoryStore()
    assert limiter.hit_now is not None
    limiter.store = Elsewhere()
    assert limiter.hit_now is None


def test_decision_recorder_counts_allowed_denied_and_shadowed() -> None:
    """The testing hook sees every decision with its key and algorithm."""
    recorder = DecisionRecorder()
    limiter = Limiter(MemoryStore(clock=ManualClock()), "token_bucket", on_decision=recorder)
    rate = Rate.parse("2/minute")
    for _ in range(3):
        limiter.hit("a", rate)
    limiter.hit("a", rate, shadow=True)
    assert (recorder.allowed, recorder.denied, recorder.shadowed) == (2, 1, 1)
    assert recorder.keys() == ["a"] * 4
    assert {r.algorithm for r in recorder.records} == {"token_bucket"}


@pytest.mark.parametrize("cls", [Limiter, AsyncLimiter])
@pytest.mark.parametrize(
    "name", ["peek", "hit_all", "reset", "acquire", "acquire_slot", "release_slot", "renew_slot"]
)
def test_each_driver_method_is_its_flow_with_the_same_parameters_and_docstring(
    cls: type, name: str
) -> None:
    """Limiter.peek and AsyncLimiter.peek are made from peek_flow: one signature, one docstring."""
    method, flow = getattr(cls, name), getattr(cls, f"{name}_flow")
    assert method.__doc__ == flow.__doc__ and method.__doc__
    assert inspect.signature(method).parameters == inspect.signature(flow).parameters
    assert inspect.iscoroutinefunction(method) is (cls is AsyncLimiter)
