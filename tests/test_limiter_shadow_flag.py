"""``shadow=`` is a yes/no flag: only True or False. A string from an environment variable
(``"false"``) read by its truth would switch enforcement off and let every denial pass."""

from __future__ import annotations

import asyncio

import pytest

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier

RATE = Rate.parse("1/minute")
NOT_FLAGS = ["false", "no", "", 1, 0, None]


@pytest.mark.parametrize("flag", NOT_FLAGS)
def test_limiter_hit_refuses_a_shadow_that_is_not_a_bool(flag: object) -> None:
    """Limiter.hit(shadow="false") on a full key is a ConfigurationError naming the method
    and the value, not an allowed, shadowed hit; nothing is consumed."""
    limiter = Limiter(clock=ManualClock())
    assert limiter.hit("k", RATE).allowed
    with pytest.raises(ConfigurationError) as caught:
        limiter.hit("k", RATE, shadow=flag)  # type: ignore[arg-type]
    assert str(caught.value) == f"Limiter.hit: shadow {flag!r} must be True or False"
    with pytest.raises(ConfigurationError):
        limiter.hit("fresh", RATE, shadow=flag)  # type: ignore[arg-type]
    assert limiter.peek("fresh", RATE).remaining == 1
    assert not limiter.hit("k", RATE, shadow=False).allowed
    assert limiter.hit("k", RATE, shadow=True).shadowed


@pytest.mark.parametrize("flag", NOT_FLAGS)
def test_async_limiter_hit_and_hit_now_refuse_it_naming_themselves(flag: object) -> None:
    """AsyncLimiter.hit and hit_now (the middleware's call without an await) refuse it too."""
    limiter = AsyncLimiter(clock=ManualClock())
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.hit: shadow "):
        asyncio.run(limiter.hit("k", RATE, shadow=flag))  # type: ignore[arg-type]
    hit_now = limiter.hit_now
    assert hit_now is not None
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.hit_now: shadow "):
        hit_now("k", RATE, shadow=flag)
    assert hit_now("k", RATE).allowed and hit_now("k", RATE, shadow=True).shadowed


def test_a_limiter_with_parts_on_and_a_two_tier_refuse_it_as_well() -> None:
    """The flow's path (a limiter with its in-process parts on) and TwoTier name their own."""
    with_parts = Limiter(clock=ManualClock(), negative_cache=10)
    with pytest.raises(ConfigurationError, match=r"^Limiter\.hit: shadow 'false' must be"):
        with_parts.hit("k", RATE, shadow="false")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^TwoTier\.hit: shadow 'false' must be"):
        TwoTier(clock=ManualClock()).hit("k", RATE, shadow="false")  # type: ignore[arg-type]
    flow = with_parts.hit_flow("k", RATE, shadow="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^Limiter\.hit: shadow 'yes' must be"):
        next(flow)


def test_hit_now_names_its_own_class_for_a_misspelt_keyword() -> None:
    """hit_now runs Limiter.hit's code without a wrapper (the hot path), but a bad call
    names AsyncLimiter.hit_now, not Limiter.hit."""
    hit_now = AsyncLimiter(clock=ManualClock()).hit_now
    assert hit_now is not None
    with pytest.raises(TypeError, match=r"^AsyncLimiter\.hit_now\(\) got an unexpected keyword"):
        hit_now("k", RATE, shadw=True)
