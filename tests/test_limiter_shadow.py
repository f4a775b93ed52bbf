"""Shadow mode, as ``Limiter.hit``'s docstring and reference.md state it: an allowed shadow hit
consumes like any hit; a shadowed denial consumes nothing and keeps the denial's numbers."""

from __future__ import annotations

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, Rate
from ratewarden.testing import ManualClock

RATE = Rate.parse("5/second")


def test_an_allowed_shadow_hit_consumes_and_a_shadowed_denial_does_not() -> None:
    """Five shadow hits use up 5/second (peek shows 0 left); the sixth and seventh are
    denials reported as allowed, each with the denial's retry_after (0.2 s), and consume
    nothing: after 0.2 s one unit is back, as without them."""
    clock = ManualClock()
    limiter = Limiter(MemoryStore(clock=clock))
    allowed = [limiter.hit("k", RATE, shadow=True) for _ in range(5)]
    assert [d.remaining for d in allowed] == [4, 3, 2, 1, 0]
    assert not any(d.shadowed for d in allowed) and all(d.retry_after == 0 for d in allowed)
    assert limiter.peek("k", RATE).remaining == 0
    for _ in range(2):
        shadowed = limiter.hit("k", RATE, shadow=True)
        assert (shadowed.allowed, shadowed.shadowed) == (True, True)
        assert (shadowed.remaining, shadowed.retry_after) == (0, 0.2)
    clock.advance(0.2)
    assert limiter.hit("k", RATE).allowed


async def test_the_asyncio_limiter_shadows_the_same_way() -> None:
    """The same sequence through ``AsyncLimiter``: the same Decisions."""
    clock = ManualClock()
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    for _ in range(5):
        assert not (await limiter.hit("k", RATE, shadow=True)).shadowed
    shadowed = await limiter.hit("k", RATE, shadow=True)
    assert (shadowed.allowed, shadowed.shadowed, shadowed.retry_after) == (True, True, 0.2)
    clock.advance(0.2)
    assert (await limiter.hit("k", RATE)).allowed
