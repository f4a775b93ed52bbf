"""``limiter.hit("k", "10/second")``: the middleware's ``Rule`` takes a rate as text, the
limiter takes a ``Rate``; the refusal says how to make one of that very text."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError, Limiter, MemoryStore, Rate
from ratewarden.testing import ManualClock

TEN = Rate.parse("10/second")


def test_a_rate_given_as_text_points_to_rate_parse_of_it() -> None:
    """A ConfigurationError naming Rate.parse('10/second'); nothing is counted."""
    limiter = Limiter(MemoryStore(clock=ManualClock(0)))
    with pytest.raises(ConfigurationError) as refused:
        limiter.hit("k", "10/second")  # type: ignore[arg-type]
    assert str(refused.value) == (
        "Limiter.hit: rates '10/second' must be a Rate or a list of Rates, not text: "
        "Rate.parse('10/second')"
    )
    assert limiter.peek("k", TEN).remaining == 10


def test_text_in_a_list_of_rates_points_to_rate_parse_of_it() -> None:
    """The same for one item of a list: the example is the item's own text."""
    limiter = Limiter(MemoryStore(clock=ManualClock(0)))
    with pytest.raises(ConfigurationError) as refused:
        limiter.hit("k", [TEN, "5/minute"])  # type: ignore[list-item]
    assert str(refused.value) == (
        "Limiter.hit: '5/minute' is not a Rate; use Rate.parse('5/minute')"
    )
