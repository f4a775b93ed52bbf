"""Bad input to a budget, a fair share or a shedder is a ConfigurationError naming what and
where, raised when the object is built or the call made, before anything is charged."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import (
    AsyncFairShare,
    AsyncFleetShedder,
    AsyncTokenBudget,
    FairShare,
    FleetShedder,
    LoadShedder,
    ShedPolicy,
    TokenBudget,
)
from ratewarden.budgets._fair import MAX_COST
from ratewarden.budgets._values import MAX_SECONDS
from tests.budgets.conftest import Harness, settle

LIMITS = {"requests": "10/minute", "tokens": "10000/minute"}


def _run(value: Any) -> Any:
    return asyncio.run(value) if asyncio.iscoroutine(value) else value


@pytest.mark.parametrize("make", [TokenBudget, AsyncTokenBudget], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("given", [None, "req-1", 5])
def test_cancel_of_anything_but_a_reservation_says_so(make: Any, given: Any) -> None:
    """cancel(None) raised AttributeError: 'NoneType' object has no attribute 'estimate'."""
    store = AsyncMemoryStore() if make is AsyncTokenBudget else MemoryStore()
    budget = make(store, LIMITS, max_output_tokens=100)
    with pytest.raises(ConfigurationError, match="cancel needs the Reservation that reserve"):
        _run(budget.cancel(given))


@pytest.mark.parametrize("seconds", [MAX_SECONDS + 1, 1e14, 1e300, math.inf, 0, -1, True])
def test_a_reservation_ttl_or_active_window_past_a_year_is_refused_when_built(
    seconds: Any,
) -> None:
    """reservation_ttl=1e14 (or active_window=1e300) was taken, worked in memory and failed
    on Redis at the first reserve ('ERR value is not an integer or out of range')."""
    store = MemoryStore()
    expected = f"must be a positive number of seconds, at most {MAX_SECONDS:,} \\(365 days\\)"
    with pytest.raises(
        ConfigurationError, match=f"reservation_ttl {re.escape(repr(seconds))} {expected}"
    ):
        TokenBudget(store, LIMITS, max_output_tokens=100, reservation_ttl=seconds)
    for keyword in ("reservation_ttl", "active_window"):
        with pytest.raises(
            ConfigurationError, match=f"{keyword} {re.escape(repr(seconds))} {expected}"
        ):
            FairShare(store, "60000/minute", {"a": 1}, **{keyword: seconds})


async def test_every_store_takes_a_year_and_none_is_given_more(
    stores: Callable[..., Harness],
) -> None:
    """The ceiling itself works on every store (a reserve, its replay and its settle), and
    1e14 s, which a Redis store failed on at the first reserve, is refused when built."""
    h = stores()
    with pytest.raises(ConfigurationError, match=r"reservation_ttl 100000000000000\.0 must be"):
        h.budget(LIMITS, max_output_tokens=100, reservation_ttl=1e14)
    budget = h.budget(LIMITS, max_output_tokens=100, reservation_ttl=MAX_SECONDS)
    held = await settle(budget.reserve("k", 100, reservation_id="r"))
    assert held and not held.replayed
    assert (await settle(budget.reserve("k", 100, reservation_id="r"))).replayed
    assert (await settle(budget.cancel(held))).status == "settled"
    cls = AsyncFairShare if h.is_async else FairShare
    with pytest.raises(ConfigurationError, match="active_window 1e"):
        cls(h.store, "60000/minute", {"a": 1}, active_window=1e300)
    fair = cls(
        h.store,
        "60000/minute",
        {"a": 1},
        active_window=MAX_SECONDS,
        reservation_ttl=MAX_SECONDS,
    )
    mine = await settle(fair.reserve("pool", "a", 1000, reservation_id="r"))
    assert mine and mine.decision.remaining == 59_000
    assert (await settle(fair.settle(mine, 400))).refunded == {"pool": 600, "tenant": 600}


async def test_a_fair_share_cost_past_a_billion_is_refused_and_the_largest_answers_alike(
    stores: Callable[..., Harness],
) -> None:
    """A hit of 10**17 + 1 at W / w = 4 was charged 400000000000000004 in memory and
    400000000000000000 on Redis (10**20: -9223372036854775808); now a cost, estimate or
    actual past MAX_COST is refused, nothing charged, and MAX_COST itself is charged exactly
    (denied, as it is past the pool) on every store."""
    h = stores()
    cls = AsyncFairShare if h.is_async else FairShare
    fair = cls(h.store, "60000/minute", {"a": 1, "b": 3})
    assert await settle(fair.hit("pool", "b", 1))
    held = await settle(fair.reserve("pool", "a", 100, reservation_id="r"))
    calls = {
        "cost": lambda n: fair.hit("pool", "a", n),
        "estimate": lambda n: fair.reserve("pool", "a", n),
        "actual": lambda n: fair.settle(held, n),
    }
    for what, call in calls.items():
        for too_much in (MAX_COST + 1, 10**17 + 1, 10**20, 2**63):
            with pytest.raises(ConfigurationError, match=f"{what} {too_much} must be at most"):
                await settle(call(too_much))
    assert (await settle(fair.settle_id("pool", "a", "r", 0))).refunded == {
        "pool": 100,
        "tenant": 400,
    }
    largest = await settle(fair.hit("pool", "a", MAX_COST))
    assert not largest and largest.charged == 4 * MAX_COST and largest.retry_after == math.inf


@pytest.mark.parametrize(
    ("build", "memory"),
    [
        (lambda: TokenBudget(None, LIMITS, max_output_tokens=100), "MemoryStore"),
        (lambda: AsyncTokenBudget(None, LIMITS, max_output_tokens=100), "AsyncMemoryStore"),
        (lambda: FairShare(None, "60000/minute", {"a": 1}), "MemoryStore"),
        (lambda: AsyncFairShare(None, "60000/minute", {"a": 1}), "AsyncMemoryStore"),
    ],
    ids=["TokenBudget", "AsyncTokenBudget", "FairShare", "AsyncFairShare"],
)
def test_no_store_is_refused_with_how_to_ask_for_an_in_process_one(
    build: Callable[[], Any], memory: str
) -> None:
    """TokenBudget(None, ...) ran on a private MemoryStore: a budget per process, unnoticed
    by a gateway whose store setting came out empty."""
    with pytest.raises(ConfigurationError, match=f"store is None; give {memory}\\(\\) for a"):
        build()


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: ShedPolicy({("critical", 1.0), ("batch", 0.5)}),
            "is a set, which has no order: give (name, ceiling) pairs in a list or tuple",
        ),
        (
            lambda: ShedPolicy(frozenset({("critical", 1.0), ("batch", 0.5)})),
            "is a set, which has no order",
        ),
        (
            lambda: LoadShedder(lambda: -3).admit("batch"),
            "LoadShedder: the utilization callable answered -3; it must answer a number >= 0",
        ),
        (
            lambda: FleetShedder(Limiter(), "api", 10, ttl=-1),
            "FleetShedder ttl -1 must be a positive number of seconds",
        ),
        (
            lambda: AsyncFleetShedder(AsyncLimiter(), "api", 10, ttl=math.inf),
            "AsyncFleetShedder ttl inf must be a positive number of seconds",
        ),
        (
            lambda: TokenBudget(MemoryStore(), LIMITS, max_output_tokens=1).replay(max_keys=-1),
            "max_keys -1 must be a whole number >= 0",
        ),
    ],
    ids=["set", "frozenset", "negative-utilization", "ttl", "async-ttl", "replay-max-keys"],
)
def test_a_shed_policy_shedder_or_replay_refuses_what_it_took_before(
    build: Callable[[], Any], expected: str
) -> None:
    """A set of classes was taken in whatever order it iterates, a utilization of -3
    admitted every class, a fleet shedder's ttl was checked only at its first acquire, and
    replay(max_keys=-1) was taken when nothing was owed."""
    with pytest.raises(ConfigurationError) as caught:
        build()
    assert expected in str(caught.value)
