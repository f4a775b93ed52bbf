"""Token bucket: a clock stepping back refills nothing.

What the token bucket shares with the other buckets (burst then refill, the window
bound, exactness, expiry and its Lua twin) is in ``test_properties.py``.
"""

from __future__ import annotations

from ratewarden import Rate
from ratewarden.algorithms import token_bucket
from tests.algorithms._limiter import SECOND

BUCKET = Rate.parse("100/minute", burst=20)  # capacity 20, refill 100 per minute


def test_clock_stepping_back_refills_nothing() -> None:
    """A request stamped before the last one waits for the refill to pass the later stamp."""
    params = token_bucket.params(BUCKET)
    state = (0, 10 * SECOND)  # empty at t = 10 s
    outcome, _, _ = token_bucket.check(params, state, 9 * SECOND, 1)
    assert not outcome.allowed
    assert outcome.retry_after_us == SECOND + 600_000
    assert outcome.reset_after_us == SECOND + 12 * SECOND
    # Once the clock is past the stamp again, the refill counts from the stamp only.
    outcome, _, _ = token_bucket.check(params, state, 10 * SECOND + 600_000, 1)
    assert outcome.allowed and outcome.remaining == 0
