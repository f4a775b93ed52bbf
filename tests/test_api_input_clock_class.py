"""A clock given as a class: ``MemoryStore(clock=ManualClock)``, the ``()`` forgotten.

It was taken, since the class has a callable ``now_us``, and every hit was then Python's
``TypeError`` for the missing ``self``. It is refused when built, naming the instance to give.
"""

from __future__ import annotations

import re

import pytest
import redis

from ratewarden import (
    AsyncMemoryStore,
    ConfigurationError,
    Limiter,
    MemoryStore,
    Rate,
)
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier

CLASS_GIVEN = re.escape(
    "clock is the class ManualClock, not a clock; pass ManualClock(), an instance"
)


@pytest.mark.parametrize(
    ("build", "owner"),
    [
        (lambda: MemoryStore(clock=ManualClock), "MemoryStore"),
        (lambda: AsyncMemoryStore(clock=ManualClock), "AsyncMemoryStore"),
        (lambda: Limiter(clock=ManualClock), "Limiter"),
        (lambda: Limiter(MemoryStore(), clock=ManualClock), "Limiter"),
        (lambda: TwoTier(clock=ManualClock), "TwoTier"),
    ],
    ids=["MemoryStore", "AsyncMemoryStore", "Limiter", "Limiter-with-store", "TwoTier"],
)
def test_a_clock_class_is_refused_when_built_naming_the_instance_to_give(
    build: object, owner: str
) -> None:
    """The owner, the class, and ``ManualClock()``: refused when built, not at the first hit."""
    with pytest.raises(ConfigurationError, match=f"^{owner}: {CLASS_GIVEN}"):
        build()  # type: ignore[operator]


def test_a_clock_class_is_refused_by_the_redis_store(redis_client: redis.Redis) -> None:
    """Every store takes its clock through the same check."""
    with pytest.raises(ConfigurationError, match=f"^RedisStore: {CLASS_GIVEN}"):
        RedisStore(redis_client, clock=ManualClock)  # type: ignore[arg-type]


def test_a_class_that_is_no_clock_is_refused_as_no_clock() -> None:
    """A class without ``now_us`` is not offered as one to build."""
    with pytest.raises(ConfigurationError, match=r"^MemoryStore: clock is the class int, not a"):
        MemoryStore(clock=int)  # type: ignore[arg-type]


def test_a_clock_instance_still_drives_the_store() -> None:
    """``ManualClock()`` is taken, and its time decides."""
    clock = ManualClock()
    limiter = Limiter(MemoryStore(clock=clock))
    rate = Rate.parse("1/minute")
    assert limiter.hit("k", rate).allowed
    assert not limiter.hit("k", rate).allowed
    clock.advance(60)
    assert limiter.hit("k", rate).allowed
