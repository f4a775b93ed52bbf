"""A call that is bad input for its algorithm is refused before the local tier spends anything.

The local bucket (``local=``) is spent in this process before the store is asked, and the
algorithm's own checks (a window has no burst; two rates may not name one state) are the
store plan's. They used to run only there: each refused call still took a unit from the local
bucket, and once it was empty the bad call was answered there, ``allowed=False`` instead of a
``ConfigurationError``, while the valid calls that share that bucket were denied with the
store's quota unused. The limiter now runs those same checks before its local parts (memory
store on the C kernel and, in a child process, without it; Redis; blocking and asyncio).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ratewarden import AsyncLimiter, AsyncTwoTier, Limiter, Rate, TwoTier
from ratewarden.errors import ConfigurationError
from ratewarden.storage import memory
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._pure import run_pure
from tests._servers import RedisServer

R10 = Rate.parse("10/minute")
R20 = Rate.parse("20/minute")
HOURLY_BURST = Rate.parse("20/hour", burst=5)
R10_BURST_10 = Rate.parse("10/minute", burst=10)

#: (algorithm, rates that include R10 and that the algorithm refuses), each as a list and a
#: tuple (a limiter remembers a tuple's check by identity, a list's by value).
BAD_WITH_R10 = [
    ("fixed_window", [R10, HOURLY_BURST]),  # a window has no burst
    ("sliding_window", [R10, HOURLY_BURST]),
    ("sliding_log", [R10, R20]),  # two limits of one window
    ("fixed_window", [R10, R20]),
    ("gcra", [R10, R10_BURST_10]),  # one bucket written two ways
    ("token_bucket", [R10, R10_BURST_10]),
    ("leaky_bucket", [R10, R10_BURST_10]),
]
CASES = [
    pytest.param(algorithm, kind(rates), id=f"{algorithm}-{kind.__name__}")
    for algorithm, rates in BAD_WITH_R10
    for kind in (list, tuple)
]
#: More bad calls than the local bucket's 5 units (R10 at local=0.5).
TRIES = 12


def _limiters(store: Any, algorithm: str, asyncio: bool) -> list[Any]:
    """Every limiter shape with a local bucket over ``store``."""
    if asyncio:
        return [
            AsyncTwoTier(store, algorithm, local=0.5),
            AsyncLimiter(store, algorithm, local=0.5),
            AsyncLimiter(store, algorithm, local=0.5, lease=2, negative_cache=100),
        ]
    return [
        TwoTier(store, algorithm, local=0.5),
        Limiter(store, algorithm, local=0.5),
        Limiter(store, algorithm, local=0.5, lease=2, negative_cache=100),
    ]


def _refused_then_whole(limiter: Any, store: Any, rates: Sequence[Rate]) -> None:
    """``rates`` refused every time, and R10 on the same key then admits what it would
    have without them: the local bucket's 5, with the store's 10 untouched before."""
    for _ in range(TRIES):
        with pytest.raises(ConfigurationError, match="algorithm"):
            limiter.hit("k", rates)
    assert store.hit(limiter.algorithm, "k", R10, 0).remaining == 10
    admitted = [limiter.hit("k", R10).allowed for _ in range(6)]
    assert admitted == [True] * 5 + [False]  # the sixth: the local bucket's share is spent


async def _refused_then_whole_async(limiter: Any, store: Any, rates: Sequence[Rate]) -> None:
    """``_refused_then_whole`` under asyncio."""
    for _ in range(TRIES):
        with pytest.raises(ConfigurationError, match="algorithm"):
            await limiter.hit("k", rates)
    assert (await store.hit(limiter.algorithm, "k", R10, 0)).remaining == 10
    admitted = [(await limiter.hit("k", R10)).allowed for _ in range(6)]
    assert admitted == [True] * 5 + [False]


@pytest.mark.parametrize(("algorithm", "rates"), CASES)
def test_bad_rates_raise_every_time_and_spend_no_local_unit(
    algorithm: str, rates: Sequence[Rate]
) -> None:
    """Memory store, blocking: twelve refused calls, then R10 still has its 5 local units."""
    for index in range(3):
        store = MemoryStore(clock=ManualClock())
        limiter = _limiters(store, algorithm, asyncio=False)[index]
        _refused_then_whole(limiter, store, rates)


@pytest.mark.parametrize(("algorithm", "rates"), CASES)
async def test_bad_rates_raise_every_time_and_spend_no_local_unit_async(
    algorithm: str, rates: Sequence[Rate]
) -> None:
    """Memory store, asyncio: the same."""
    for index in range(3):
        store = AsyncMemoryStore(clock=ManualClock())
        limiter = _limiters(store, algorithm, asyncio=True)[index]
        await _refused_then_whole_async(limiter, store, rates)


@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_window", "sliding_log"])
def test_a_windows_burst_alone_raises_every_time(algorithm: str) -> None:
    """One Rate with a burst on a window (the path that skips the rates' list check): its
    local bucket holds 2 units (burst 5 at 0.5), and the third call used to be a denial."""
    limiter = TwoTier(MemoryStore(clock=ManualClock()), algorithm, local=0.5)
    for _ in range(TRIES):
        with pytest.raises(ConfigurationError, match="has no separate burst"):
            limiter.hit("k", HOURLY_BURST)


def test_a_calls_own_algorithm_is_the_one_checked() -> None:
    """A flow's own ``algorithm=`` (a rule's, as adapters compose ``hit_flow``): the rates
    are checked for it, not the limiter's; the same Rate stays good for the limiter's own
    algorithm afterwards (and before)."""
    limiter = TwoTier(MemoryStore(clock=ManualClock()), "gcra", local=0.5)
    assert limiter.hit("k", HOURLY_BURST).allowed
    for _ in range(TRIES):
        with pytest.raises(ConfigurationError, match="fixed_window algorithm counts 20"):
            limiter.run(limiter.hit_flow("k", HOURLY_BURST, algorithm="fixed_window"))
    assert limiter.hit("k", HOURLY_BURST).allowed


@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket", "leaky_bucket"])
def test_a_shared_bucket_is_named_a_bucket(algorithm: str) -> None:
    """Two rates of one bucket state are refused in a bucket's words (no window, no count,
    no smaller limit: the limits are equal), by a plain limiter as by a two-tier one."""
    for limiter in (
        Limiter(MemoryStore(clock=ManualClock()), algorithm),
        TwoTier(MemoryStore(clock=ManualClock()), algorithm, local=0.5),
    ):
        with pytest.raises(ConfigurationError) as refused:
            limiter.hit("k", [R10, R10_BURST_10])
        message = str(refused.value)
        assert f"10/minute and 10/minute (burst 10) of the {algorithm} algorithm" in message
        assert "one bucket" in message and "capacity" in message
        assert "window" not in message.replace("no window", "")
        assert "count" not in message.replace("or count", "")


def test_a_shared_window_keeps_the_window_words() -> None:
    """Two limits of one window: the window's message as before."""
    with pytest.raises(ConfigurationError, match=r"count the same window.*smaller limit"):
        Limiter(MemoryStore(clock=ManualClock()), "sliding_log").hit("k", [R10, R20])


@pytest.mark.redis
@pytest.mark.parametrize(("algorithm", "rates"), CASES[::3])
def test_bad_rates_spend_no_local_unit_over_redis(
    redis_server: RedisServer, algorithm: str, rates: Sequence[Rate]
) -> None:
    """Redis store, blocking: the same, the store's quota read back from Redis."""
    redis_server.client().flushall()
    store = RedisStore.from_url(redis_server.url, clock=ManualClock(), timeout=5.0)
    try:
        for index in range(3):
            store.reset(algorithm, "k", R10)
            _refused_then_whole(_limiters(store, algorithm, asyncio=False)[index], store, rates)
    finally:
        store.close()


@pytest.mark.redis
@pytest.mark.parametrize(("algorithm", "rates"), CASES[1::3])
async def test_bad_rates_spend_no_local_unit_over_redis_async(
    redis_server: RedisServer, algorithm: str, rates: Sequence[Rate]
) -> None:
    """Redis store, asyncio: the same."""
    redis_server.client().flushall()
    store = AsyncRedisStore.from_url(redis_server.url, clock=ManualClock(), timeout=5.0)
    try:
        for index in range(3):
            await store.reset(algorithm, "k", R10)
            limiter = _limiters(store, algorithm, asyncio=True)[index]
            await _refused_then_whole_async(limiter, store, rates)
    finally:
        await store.aclose()


@pytest.mark.skipif(not memory.SPEEDUPS, reason="no kernel here: this run is the pure one")
def test_the_same_refusals_hold_without_the_kernel() -> None:
    """This file's memory-store tests again, in a child process with RATEWARDEN_PURE=1."""
    output = run_pure(__file__, "-m", "not redis", timeout=240)
    assert "1 skipped" in output
