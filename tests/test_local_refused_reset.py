"""A reset its algorithm refuses raises before this process forgets anything.

``reset`` drops what the process holds for a key (its local bucket, lease and remembered
denial) and then asks the store. It checked the rates only in general first, so a rate set
the algorithm refuses (a burst on a window) raised from the store after the local bucket was
already full again: a refused call that still gave a key its local share back. Memory
store, blocking and asyncio, in ManualClock time.
"""

from __future__ import annotations

import pytest

from ratewarden import AsyncTwoTier, Rate, TwoTier
from ratewarden.errors import ConfigurationError
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock

R10 = Rate.parse("10/minute")
WITH_BURST = [R10, Rate.parse("20/hour", burst=5)]  # a window has no burst


def test_a_refused_reset_leaves_the_local_bucket_spent() -> None:
    limiter = TwoTier(MemoryStore(clock=ManualClock()), "fixed_window", local=0.5)
    assert [limiter.hit("k", R10).allowed for _ in range(6)] == [True] * 5 + [False]
    with pytest.raises(ConfigurationError, match="burst"):
        limiter.reset("k", WITH_BURST)
    assert not limiter.hit("k", R10).allowed  # before: the local bucket was full again


async def test_a_refused_reset_leaves_the_local_bucket_spent_under_asyncio() -> None:
    limiter = AsyncTwoTier(AsyncMemoryStore(clock=ManualClock()), "fixed_window", local=0.5)
    assert [(await limiter.hit("k", R10)).allowed for _ in range(6)] == [True] * 5 + [False]
    with pytest.raises(ConfigurationError, match="burst"):
        await limiter.reset("k", WITH_BURST)
    assert not (await limiter.hit("k", R10)).allowed
