"""``slot`` given a keyword it does not take, or too many positional arguments.

``slot`` was the one limiter method without the keyword check: a misspelt keyword was
Python's ``TypeError``, and under ``TwoTier`` it named ``Limiter.slot()``. It is now the
``ConfigurationError`` every other method gives, naming the class called.
"""

from __future__ import annotations

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier


@pytest.mark.parametrize("make", [Limiter, TwoTier], ids=["Limiter", "TwoTier"])
def test_slot_refuses_a_misspelt_keyword_naming_the_class_and_takes_nothing(
    make: type[Limiter],
) -> None:
    """``slot(..., tll=3)``: the class called, the keywords it takes and the one meant; the
    slot is still free after."""
    limiter = make(MemoryStore(clock=ManualClock()))
    name = make.__name__
    with (
        pytest.raises(
            ConfigurationError,
            match=rf"^{name}\.slot: unknown keyword 'tll'; it takes key, limit, slots, ttl; "
            r"did you mean ttl\?$",
        ),
        limiter.slot("s", 1, tll=3),  # type: ignore[call-arg]
    ):
        pass
    with (
        pytest.raises(ConfigurationError, match=rf"^{name}\.slot: 3 positional arguments"),
        limiter.slot("s", 1, 2),  # type: ignore[misc]
    ):
        pass
    with limiter.slot("s", 1) as lease:
        assert lease.allowed


@pytest.mark.parametrize("make", [AsyncLimiter, AsyncTwoTier], ids=["AsyncLimiter", "AsyncTwoTier"])
async def test_the_asyncio_slot_refuses_it_the_same_way(make: type[AsyncLimiter]) -> None:
    """The same refusal from ``async with``, naming the asyncio class."""
    limiter = make(AsyncMemoryStore(clock=ManualClock()))
    with pytest.raises(ConfigurationError, match=rf"^{make.__name__}\.slot: unknown keyword 'tll'"):
        async with limiter.slot("s", 1, tll=3):  # type: ignore[call-arg]
            pass
    async with limiter.slot("s", 1) as lease:
        assert lease.allowed
