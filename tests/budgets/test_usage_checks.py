"""Every ``Usage`` is checked when it is made: a bad count never reaches a budget.

``charge``, ``owe`` and ``settle_id`` take a ``Usage`` the caller built; a negative
count would refund the budget, and a fractional one was rounded differently by the
memory store and by Redis. So ``Usage`` itself refuses them, naming the field and the
value, and every budget operation on a good one answers the same on every store.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio

from ratewarden import AsyncMemoryStore, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, Backlog, TokenBudget, Usage
from ratewarden.errors import ConfigurationError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.budgets.conftest import Harness, settle

LIMITS = {
    "requests": "50/minute",
    "tokens": "10000/minute",
    "input_tokens": "8000/minute",
    "output_tokens": "4000/minute",
    "images": "20/minute",
}

#: (what the error names, the arguments of a ``Usage`` that must be refused).
BAD: list[tuple[str, tuple[Any, ...]]] = [
    *[
        (f"{field} {value!r}", args)
        for field, position in (("input_tokens", 0), ("output_tokens", 1), ("requests", 2))
        for value in (-50, -1, 1.5, 2.0, True, "3", None)
        for args in [tuple(value if i == position else 1 for i in range(3))]
    ],
    *[
        (f"units['images'] {value!r}", (1, 1, 1, (("images", value),)))
        for value in (-1, 1.5, True, "2", None)
    ],
    ("units {'images': 2}", (1, 1, 1, {"images": 2})),  # a mapping is Usage.of's
    ("units item ('images',)", (1, 1, 1, (("images",),))),
    ("units name 'Images'", (1, 1, 1, (("Images", 2),))),
    ("units names 'tokens'", (1, 1, 1, (("tokens", 5),))),  # would be ignored: not a unit
    ("units names 'images' twice", (1, 1, 1, (("images", 1), ("images", 2)))),
]


@pytest.mark.parametrize(("named", "args"), BAD, ids=[named for named, _ in BAD])
def test_a_usage_refuses_a_count_that_is_not_a_whole_number_at_least_zero(
    named: str, args: tuple[Any, ...]
) -> None:
    """Negative, fractional, bool or non-int counts in any field: refused, named with the value."""
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        Usage(*args)


def test_usage_of_still_builds_the_same_usage_and_refuses_the_same_counts() -> None:
    """``Usage.of`` takes units as a mapping; it and the constructor agree, units sorted."""
    assert Usage.of(3, 4, 1, {"video": 1, "images": 2}) == Usage(
        3, 4, 1, (("video", 1), ("images", 2))
    )
    assert Usage.of(3, 4, 1, {"images": 2}).units == (("images", 2),)
    assert Usage.of() == Usage() == Usage(0, 0, 1, ())
    with pytest.raises(ConfigurationError, match=re.escape("output_tokens -1")):
        Usage.of(0, -1, 0)
    with pytest.raises(ConfigurationError, match=re.escape("units['images'] 0.5")):
        Usage.of(units={"images": 0.5})  # type: ignore[dict-item]


async def _state(budget: Any) -> tuple[Any, ...]:
    """What a bad call could change: each axis' remaining and when it refills, and what is owed."""
    decision = await settle(budget.peek("k"))
    return decision, budget.backlog.owing(), budget.backlog.owed("k")


@pytest.mark.parametrize("operation", ["charge", "owe", "settle_id"])
async def test_charge_owe_and_settle_id_refuse_a_bad_usage_and_change_nothing(
    stores: Callable[..., Harness], operation: str
) -> None:
    """On every store, sync and async: each bad Usage is refused, and the budget is as it was."""
    h = stores()
    budget = h.budget(LIMITS, max_output_tokens=500, backlog=Backlog())
    held = await settle(budget.reserve("k", 300, units={"images": 2}, reservation_id="r1"))
    assert held
    calls = {
        "charge": lambda usage: budget.charge("k", usage),
        "owe": lambda usage: budget.owe("k", usage),
        "settle_id": lambda usage: budget.settle_id("k", "r1", usage),
    }
    before = await _state(budget)
    for named, args in BAD:
        with pytest.raises(ConfigurationError, match=re.escape(named)):
            await settle(calls[operation](Usage(*args)))
    assert await _state(budget) == before
    # The reservation was not touched: a good settle still applies it, once.
    settled = await settle(budget.settle_id("k", "r1", Usage.of(300, 100, 1, {"images": 2})))
    assert settled.status == "settled"
    assert settled.refunded == {
        "requests": 0,
        "tokens": 400,
        "input_tokens": 0,
        "output_tokens": 400,
        "images": 0,
    }


GOOD = [
    Usage(0, 1_350, 0, (("images", 0),)),
    Usage(5, 0, 1, (("images", 1),)),
    Usage(0, 0, 0, (("images", 0),)),
    Usage(2_000, 3_999, 1, (("images", 19),)),  # more than is left: charged up to empty
    Usage(1, 1, 0, (("images", 3),)),
]


async def _story(budget: Any, clock: ManualClock) -> list[Any]:
    """Good usages through charge, owe (paid by replay) and settle_id; every answer."""
    answers: list[Any] = []
    for n, usage in enumerate(GOOD):
        answers.append(await settle(budget.charge("k", usage)))
        answers.append(budget.owe("j", usage))
        answers.append(await settle(budget.replay()))
        estimate = Usage.of(400, 200, 1, {"images": 2})
        answers.append(await settle(budget.reserve_usage("s", estimate, reservation_id=f"r{n}")))
        answers.append(await settle(budget.settle_id("s", f"r{n}", usage)))
        answers.extend([await settle(budget.peek(key)) for key in ("k", "j", "s")])
        clock.advance(1.7)
    return answers


@pytest.mark.redis
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_memory_and_redis_answer_the_same_to_good_usages(
    redis_server: RedisServer, flavour: str
) -> None:
    """charge, owe + replay, reserve_usage and settle_id: equal answers, step by step."""
    start = 1_700_000_000.25
    here, there = ManualClock(start), ManualClock(start)
    client = redis_server.client()
    client.flushall()
    options: dict[str, Any] = {"max_output_tokens": 500}
    if flavour == "sync":
        memory: Any = TokenBudget(MemoryStore(clock=here), LIMITS, **options, backlog=Backlog())
        remote: Any = TokenBudget(
            RedisStore(client, clock=there, timeout=1.0), LIMITS, **options, backlog=Backlog()
        )
        closes: list[Any] = [client.close]
    else:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        memory = AsyncTokenBudget(
            AsyncMemoryStore(clock=here), LIMITS, **options, backlog=Backlog()
        )
        remote = AsyncTokenBudget(
            AsyncRedisStore(aclient, clock=there, timeout=1.0), LIMITS, **options, backlog=Backlog()
        )
        closes = [client.close, aclient.aclose]
    try:
        mine, theirs = await _story(memory, here), await _story(remote, there)
        assert mine == theirs
        assert mine[0].charged == {
            "requests": 0,
            "tokens": 1_350,
            "input_tokens": 0,
            "output_tokens": 1_350,
            "images": 0,
        }
    finally:
        for close in closes:
            await settle(close())
