"""A limiter method given a keyword it does not take, or too many positional arguments, is a
ConfigurationError naming the public method (``Limiter.peek``), not a TypeError naming the
private flow (``Operations.peek_flow()``); ``peek(cost=)`` says why it takes none."""

from __future__ import annotations

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, Rate
from ratewarden.errors import ConfigurationError

RATE = Rate.parse("10/second")


def test_peek_with_a_cost_says_it_consumes_nothing() -> None:
    """The method, the keyword, and how to ask whether a cost fits."""
    with pytest.raises(ConfigurationError) as caught:
        Limiter(MemoryStore()).peek("k", RATE, cost=2)
    message = str(caught.value)
    assert message.startswith("Limiter.peek: unknown keyword 'cost'; it consumes nothing")
    assert "peek_flow" not in message


async def test_the_asyncio_twin_names_itself() -> None:
    """AsyncLimiter.peek, at the await."""
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.peek: unknown keyword 'cost'"):
        await AsyncLimiter(AsyncMemoryStore()).peek("k", RATE, cost=2)


def test_a_misspelt_keyword_gets_the_nearest_name() -> None:
    """acquire(timout=) -> did you mean timeout?"""
    with pytest.raises(ConfigurationError, match="did you mean timeout"):
        Limiter(MemoryStore()).acquire("k", RATE, timout=1.0)


def test_too_many_positional_arguments_are_counted() -> None:
    """reset takes key and rates."""
    with pytest.raises(ConfigurationError, match=r"^Limiter\.reset: 3 positional arguments"):
        Limiter(MemoryStore()).reset("k", RATE, 3)
