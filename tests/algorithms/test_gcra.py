"""GCRA: the worked arithmetic of its effective window.

What GCRA shares with the other buckets (the burst, costs, exactness over long runs,
expiry and its Lua twin) is in ``test_properties.py``.
"""

from __future__ import annotations

from functools import partial

from ratewarden import Rate
from tests.algorithms._limiter import limiter_at

make_limiter = partial(limiter_at, "gcra")


def test_refill_after_is_the_time_to_the_next_unit_not_to_full() -> None:
    """3/minute (issue #15): after 1, 2 and 3 requests the next unit is 20 s away while full is
    20, 40 and 60 s away; the 4th is denied with retry_after and refill_after both 20 s."""
    limiter, clock = make_limiter()
    rate = Rate.parse("3/minute")
    first, second, third, fourth = (limiter.hit("k", rate) for _ in range(4))
    assert (first.remaining, first.refill_after, first.reset_after) == (2, 20.0, 20.0)
    assert (second.remaining, second.refill_after, second.reset_after) == (1, 20.0, 40.0)
    assert (third.remaining, third.refill_after, third.reset_after) == (0, 20.0, 60.0)
    assert not fourth.allowed and fourth.retry_after == fourth.refill_after == 20.0
    clock.advance(20)
    assert limiter.hit("k", rate).allowed
