"""Fixed window: the boundary burst, epoch alignment and the window's end.

Oversized costs, peeks, the refused burst, expiry and the Lua twin: test_properties.py.
"""

from __future__ import annotations

from functools import partial

from ratewarden import Rate
from tests.algorithms._limiter import NOON, limiter_at

PER_MINUTE = Rate.parse("100/minute")

make_limiter = partial(limiter_at, "fixed_window")


def test_two_hundred_pass_across_the_minute_boundary() -> None:
    """100/minute: 100 at 12:00:59 and 100 at 12:01:00 all pass; the 101st of each is denied."""
    limiter, clock = make_limiter(NOON + 59)
    first = [limiter.hit("k", PER_MINUTE) for _ in range(101)]
    assert all(d.allowed for d in first[:100])
    assert not first[100].allowed
    assert first[100].retry_after == 1.0  # until 12:01:00
    assert first[100].remaining == 0

    clock.advance(1)
    second = [limiter.hit("k", PER_MINUTE) for _ in range(101)]
    assert all(d.allowed for d in second[:100])
    assert not second[100].allowed
    assert second[100].retry_after == 60.0  # until 12:02:00


def test_denied_request_waits_until_the_next_window() -> None:
    """A denial mid-window waits exactly to the next epoch-aligned boundary, then passes."""
    limiter, clock = make_limiter(NOON + 17.25)
    for _ in range(100):
        assert limiter.hit("k", PER_MINUTE).allowed
    denied = limiter.hit("k", PER_MINUTE)
    assert not denied.allowed
    assert denied.retry_after == 42.75
    clock.advance_us(42_750_000 - 1)
    assert not limiter.hit("k", PER_MINUTE).allowed
    clock.advance_us(1)
    assert limiter.hit("k", PER_MINUTE).allowed


def test_remaining_and_reset_after_count_down_to_the_window_end() -> None:
    """remaining = limit - count; reset_after runs to the window end, 0 for an untouched key."""
    limiter, clock = make_limiter(NOON + 20)
    assert limiter.peek("k", PER_MINUTE).reset_after == 0
    assert [limiter.hit("k", PER_MINUTE, cost=c).remaining for c in (1, 4, 10)] == [99, 95, 85]
    clock.advance(10)
    decision = limiter.peek("k", PER_MINUTE)
    assert decision.remaining == 85
    assert decision.reset_after == 30.0


def test_refill_after_is_the_windows_end_even_on_a_fresh_key() -> None:
    """At 12:00:15, 100/minute: a peek on an unseen key has nothing to reset (reset_after 0),
    yet no more than its 100 can be used until the minute ends, 45 s away; so for hits."""
    limiter, _ = make_limiter(NOON + 15)
    peek = limiter.peek("k", PER_MINUTE)
    assert (peek.remaining, peek.reset_after, peek.refill_after) == (100, 0.0, 45.0)
    assert limiter.hit("k", PER_MINUTE, cost=100).refill_after == 45.0
    denied = limiter.hit("k", PER_MINUTE)
    assert not denied.allowed and denied.retry_after == denied.refill_after == 45.0
