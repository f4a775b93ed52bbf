"""The legacy X-RateLimit-* headers of a layered denial no wait can help report one layer.

A layered Decision's ``remaining`` is the least of every layer's, which for a denial may
be another layer's than its ``limit``; Limit, Remaining and Used must be one layer's (the
reported limit's), as reference.md says.
"""

from __future__ import annotations

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.headers import HeaderOptions, rate_limit_headers
from ratewarden.testing import ManualClock


def test_a_layered_never_allowed_denial_reports_its_limits_own_remaining() -> None:
    """gcra [10/minute, 5/second]: 5, then 4 a second later, then 7 another second later
    (more than the second's 5 can ever allow): Limit 5 is the per-second layer's, and so
    are Remaining 5 and Used 0 (its bucket refilled), not the minute's 1."""
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter(MemoryStore(clock=clock))
    rates = [Rate.parse("10/minute"), Rate.parse("5/second")]
    assert limiter.hit("k", rates, 5)
    clock.advance(1)
    assert limiter.hit("k", rates, 4)
    clock.advance(1)
    denied = limiter.hit("k", rates, 7)
    assert not denied.allowed and denied.limit == 5 and denied.remaining == 1
    options = HeaderOptions(draft=None, legacy=True, github=True)
    headers = dict(rate_limit_headers("api", denied, options, now=clock.now()))
    assert headers["X-RateLimit-Limit"] == "5"
    assert headers["X-RateLimit-Remaining"] == "5"
    assert headers["X-RateLimit-Used"] == "0"
    assert "X-RateLimit-Reset" not in headers
