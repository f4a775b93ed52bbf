"""Bad options and bad calls of the two tiers, in the project's words.

``lease_ttl`` without ``lease`` used to be taken and do nothing; a misspelt keyword
of ``TwoTier.hit`` was Python's bare ``TypeError: Limiter.hit() got an unexpected
keyword argument``. Both are ``ConfigurationError`` now, naming what to give, and
consume nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ratewarden import Decision, Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter
from ratewarden.metrics import Metrics
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier

RATE = Rate.parse("10/minute")


@pytest.mark.parametrize("cls", [TwoTier, AsyncTwoTier, Limiter, AsyncLimiter])
def test_lease_ttl_without_a_lease_is_refused(cls: type[Any]) -> None:
    """lease_ttl=5 alone: refused, naming the class and saying to give lease=k with it."""
    with pytest.raises(ConfigurationError) as caught:
        cls(lease_ttl=5)
    message = str(caught.value)
    assert message.startswith(f"{cls.__name__}: lease_ttl=5 is given without lease=")
    assert "give lease=k" in message


def test_lease_ttl_with_a_lease_is_taken() -> None:
    """lease=5, lease_ttl=30: the balance lives 30 s, not the period (60 s)."""
    clock = ManualClock()
    tiers = TwoTier(MemoryStore(clock=clock), lease=5, lease_ttl=30)
    tiers.hit("key", Rate.parse("100/minute"))
    assert tiers.leases is not None
    assert tiers.leases.outstanding(clock.now_us()) == 4
    clock.advance(30)
    assert tiers.leases.outstanding(clock.now_us()) == 0


def call(tiers: Any, *args: Any, **kwargs: Any) -> Decision:
    """``tiers.hit(...)``, awaited for the asyncio twin."""
    if isinstance(tiers, AsyncTwoTier):
        decision: Decision = asyncio.run(tiers.hit(*args, **kwargs))
        return decision
    return tiers.hit(*args, **kwargs)  # type: ignore[no-any-return]


@pytest.fixture(params=[TwoTier, AsyncTwoTier])
def tiers(request: pytest.FixtureRequest) -> Any:
    return request.param(clock=ManualClock())


def test_a_misspelt_hit_keyword_names_the_public_method(tiers: Any) -> None:
    """shadw=True: 'TwoTier.hit: unknown keyword 'shadw'; ... did you mean shadow?', and
    nothing is consumed."""
    name = type(tiers).__name__
    with pytest.raises(ConfigurationError) as caught:
        call(tiers, "key", RATE, shadw=True)
    message = str(caught.value)
    assert message.startswith(f"{name}.hit: unknown keyword 'shadw'")
    assert message.endswith("did you mean shadow?")
    assert call(tiers, "key", RATE).remaining == 9  # the refused call took nothing


def test_too_many_positional_arguments_name_the_public_method(tiers: Any) -> None:
    """hit("key", rate, 1, True): shadow is keyword-only; said as for the other methods."""
    with pytest.raises(ConfigurationError, match=r"\.hit: 4 positional arguments given"):
        call(tiers, "key", RATE, 1, True)


def test_a_missing_argument_names_the_public_method(tiers: Any) -> None:
    """hit("key"): Python's TypeError, naming TwoTier.hit() (not Limiter.hit())."""
    with pytest.raises(TypeError) as caught:
        call(tiers, "key")
    assert str(caught.value) == (
        f"{type(tiers).__name__}.hit() missing 1 required positional argument: 'rates'"
    )


def test_a_type_error_raised_inside_a_good_call_is_left_as_it_is() -> None:
    """A metrics hook raising TypeError: that error, unchanged (not taken for bad input)."""

    class Broken(Metrics):
        def decision(self, *, rule: str, algorithm: str, decision: Decision) -> None:
            raise TypeError("the hook's own")

    tiers = TwoTier(clock=ManualClock(), metrics=Broken())
    with pytest.raises(TypeError, match=r"^the hook's own$"):
        tiers.hit("key", RATE, shadow=True)
