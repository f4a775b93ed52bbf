"""``store.max_keys`` and ``store.clock`` set after construction are checked as the constructor
checks them.

docs/storage.md invites setting them ("a new value is used from the next call"), but a set
value was taken unchecked: ``max_keys = -5`` emptied the table at the next new key and then
raised ``KeyError: 'dictionary is empty'``, ``max_keys = "x"`` raised ``TypeError: '>' not
supported``, and ``clock = 5`` an AttributeError at the next hit. Now the setter refuses them
with the constructor's ConfigurationError and keeps the value it had. The tests run on the
kernel when it is built (gcra is decided in C, sliding_window on the Python path), and once
more in a child process with ``RATEWARDEN_PURE=1``.
"""

from __future__ import annotations

import pytest

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.storage import memory
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests._pure import run_pure

RATE = Rate.parse("1/second")
STORES = [MemoryStore, AsyncMemoryStore]


@pytest.mark.parametrize("value", [-5, 0, "x", 2.5, True, None], ids=repr)
@pytest.mark.parametrize("store_type", STORES, ids=["blocking", "asyncio"])
def test_a_bad_max_keys_is_refused_when_set_and_changes_nothing(
    store_type: type[MemoryStore], value: object
) -> None:
    """The constructor's message, and the store keeps its bound and keeps deciding."""
    store = store_type(max_keys=3)
    with pytest.raises(ConfigurationError) as refused:
        store.max_keys = value  # type: ignore[assignment]
    assert str(refused.value) == f"max_keys {value!r} must be a whole number >= 1"
    with pytest.raises(ConfigurationError) as built:
        store_type(max_keys=value)  # type: ignore[arg-type]
    assert str(built.value) == str(refused.value)
    assert store.max_keys == 3


@pytest.mark.parametrize("algorithm", ["gcra", "sliding_window"])
def test_after_a_refused_max_keys_the_old_bound_still_evicts(algorithm: str) -> None:
    """-5 and "x" refused: the next new keys are decided and evicted past the old bound, on
    the kernel's path (gcra) and the Python path (sliding_window) alike."""
    store = MemoryStore(clock=ManualClock(), max_keys=2)
    limiter = Limiter(store, algorithm=algorithm)
    for value in (-5, "x"):
        with pytest.raises(ConfigurationError):
            store.max_keys = value  # type: ignore[assignment]
    for key in ("a", "b", "c", "d"):
        assert limiter.hit(key, RATE).allowed
    assert len(store) == 2 and store.evictions == 2


@pytest.mark.parametrize("algorithm", ["gcra", "sliding_window"])
def test_a_good_max_keys_set_later_is_used_from_the_next_call(algorithm: str) -> None:
    """The documented use still works: a smaller bound evicts from the next new key."""
    store = MemoryStore(clock=ManualClock())
    limiter = Limiter(store, algorithm=algorithm)
    store.max_keys = 2
    for key in ("a", "b", "c"):
        limiter.hit(key, RATE)
    assert store.max_keys == 2 and len(store) == 2 and store.evictions == 1


@pytest.mark.parametrize("max_keys", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("algorithm", ["gcra", "sliding_window"])
def test_the_key_just_written_is_never_the_one_evicted(algorithm: str, max_keys: int) -> None:
    """Each new key past the bound is kept, and limited: its second hit at 1/minute is denied.
    With max_keys=2 the sweep moved both older keys behind the new one, so the eviction
    dropped the key just written and a third key was never limited."""
    store = MemoryStore(clock=ManualClock(), max_keys=max_keys)
    limiter = Limiter(store, algorithm=algorithm)
    rate = Rate.parse("1/minute")
    for key in [f"k{i}" for i in range(max_keys + 3)]:
        assert [limiter.hit(key, rate).allowed for _ in range(2)] == [True, False], key
    assert len(store) == max_keys and store.evictions == 3


@pytest.mark.parametrize("store_type", STORES, ids=["blocking", "asyncio"])
def test_a_clock_that_is_not_one_is_refused_when_set_and_changes_nothing(
    store_type: type[MemoryStore],
) -> None:
    """store.clock = 5: the constructor's check (naming the store), and the old clock stays."""
    clock = ManualClock()
    store = store_type(clock=clock)
    with pytest.raises(ConfigurationError) as refused:
        store.clock = 5  # type: ignore[assignment]
    assert str(refused.value).startswith(f"{store_type.__name__}: clock 5 (an int) is not a clock")
    assert store.clock is clock


@pytest.mark.parametrize("algorithm", ["gcra", "sliding_window"])
def test_after_a_refused_clock_the_old_clock_still_decides(algorithm: str) -> None:
    """The ManualClock given at construction still times the hits after clock = 5."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    limiter = Limiter(store, algorithm=algorithm)
    with pytest.raises(ConfigurationError):
        store.clock = 5  # type: ignore[assignment]
    assert limiter.hit("k", RATE).allowed
    assert not limiter.hit("k", RATE).allowed
    clock.advance(2)  # past the sliding window's previous window too
    assert limiter.hit("k", RATE).allowed


async def test_a_new_clock_set_on_the_asyncio_store_times_its_hits() -> None:
    """A clock set later reaches the asyncio store's hits too."""
    store = AsyncMemoryStore()
    clock = ManualClock()
    store.clock = clock
    limiter = AsyncLimiter(store)
    assert (await limiter.hit("k", RATE)).allowed
    assert not (await limiter.hit("k", RATE)).allowed
    clock.advance(1)
    assert (await limiter.hit("k", RATE)).allowed


@pytest.mark.skipif(not memory.SPEEDUPS, reason="no kernel here: this run is the pure one")
def test_the_same_checks_hold_without_the_kernel() -> None:
    """This file again, in a child process with RATEWARDEN_PURE=1 (plain Python, no kernel)."""
    output = run_pure(__file__, timeout=120)
    assert "1 skipped" in output
