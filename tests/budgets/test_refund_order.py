"""Refunds whatever the order reservations are settled in, and a reserve under a settled id.

A settle gives back a reservation's unused units only down to now plus what was charged
after it (the exact-ledger bound of ``_gcra_multi``). What was charged after it counted
later reservations at their whole estimates even once they had been settled, so settling
newest first (or streams ending in any order) lost refunds: 10 reservations of 1,000 on
10,000 a minute, cancelled newest first, gave back 5,000. An axis now keeps the refunds of
its busy period (up to 8, merged toward the older), and a settle subtracts those of
reservations charged after it. And a reserve under the id of a settled reservation was a
free replay (a router's retry after it cancelled the tenant went through uncharged); now
only an open reservation replays.

Every store (memory, a redis-server, a 3-primary Cluster; blocking and asyncio) through
``stores``; the Lua script against its pure twin where refunds are merged.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from ratewarden import MemoryStore, Rate
from ratewarden.budgets import Account, AsyncBudgetRouter, BudgetRouter, FairShare, TokenBudget
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.budgets.conftest import Harness, settle

TOKENS = {"tokens": "10000/minute"}


@pytest.mark.parametrize("order", ["newest first", "oldest first", "shuffled"])
async def test_every_refund_comes_back_whatever_the_order(
    stores: Callable[..., Harness], order: str
) -> None:
    """Ten reservations of 1,000 at one instant, each settled at 0 used: the whole 10,000 is
    back, in any order (newest first gave back 5,000 before)."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=1000)
    held = [await settle(budget.reserve("k", input_tokens=0)) for _ in range(10)]
    assert all(held)
    if order == "newest first":
        held.reverse()
    elif order == "shuffled":
        random.Random(5).shuffle(held)
    refunds = [
        (await settle(budget.settle(one, output_tokens=0))).refunded["tokens"] for one in held
    ]
    assert refunds == [1000] * 10
    assert (await settle(budget.peek("k"))).axis("tokens").remaining == 10000


async def test_streams_ending_in_any_order_give_back_what_they_did_not_use(
    stores: Callable[..., Harness],
) -> None:
    """Twenty streams of 500 in and up to 4,096 out reserved together, 300 out used each,
    ending in a shuffled order: the budget is left at 10,000 minus the 16,000 used, not
    short of what an exact ledger leaves (57% of the unused came back before)."""
    h = stores()
    budget = h.budget({"tokens": "100000/minute"}, max_output_tokens=4096)
    held = [await settle(budget.reserve("t", input_tokens=500)) for _ in range(20)]
    assert all(held)
    random.Random(3).shuffle(held)
    for one in held:
        await settle(budget.settle(one, output_tokens=300))
    assert (await settle(budget.peek("t"))).axis("tokens").remaining == 100000 - 20 * 800


async def test_a_reserve_under_a_settled_id_is_a_new_request(
    stores: Callable[..., Harness],
) -> None:
    """Reserve, cancel, reserve the same id: charged afresh (it replayed, charging nothing);
    an open id still replays."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=1000)
    first = await settle(budget.reserve("k", input_tokens=500, reservation_id="req-7"))
    assert (await settle(budget.cancel(first))).status == "settled"
    again = await settle(budget.reserve("k", input_tokens=500, reservation_id="req-7"))
    assert again.allowed and not again.replayed
    assert again.decision.axis("tokens").remaining == 10000 - 1500
    replay = await settle(budget.reserve("k", input_tokens=500, reservation_id="req-7"))
    assert replay.replayed and replay.decision.axis("tokens").remaining == 10000 - 1500
    assert (await settle(budget.settle(again, output_tokens=1000))).status == "settled"
    assert (await settle(budget.peek("k"))).axis("tokens").remaining == 10000 - 1500


@pytest.mark.parametrize("twin", ["blocking", "asyncio"])
async def test_a_routers_retry_under_the_same_id_charges_the_tenant(twin: str) -> None:
    """The walk-through's case: the upstream denies, the router cancels the tenant, the
    caller retries with the same id once the upstream has room: the tenant is charged
    (it was served at the tenant's expense of nothing)."""
    from ratewarden import AsyncMemoryStore
    from ratewarden.budgets import AsyncTokenBudget

    clock = ManualClock()
    if twin == "blocking":
        store: object = MemoryStore(clock=clock)
        kind: type = TokenBudget
        router_kind: type = BudgetRouter
    else:
        store, kind, router_kind = (
            AsyncMemoryStore(clock=clock),
            AsyncTokenBudget,
            AsyncBudgetRouter,
        )
    tenants = kind(store, TOKENS, max_output_tokens=1000)
    upstream = kind(store, {"tokens": "2000/minute"}, max_output_tokens=1000)
    router = router_kind(Account("tenant", tenants, "t"), [Account("up", upstream, "u")])
    assert await settle(router.reserve(1000, 1000))  # fills the upstream
    first = await settle(router.reserve(500, 1000, reservation_id="req-7"))
    assert not first.allowed
    clock.advance(first.retry_after)
    retry = await settle(router.reserve(500, 1000, reservation_id="req-7"))
    assert retry.allowed and not retry.tenant.replayed
    await settle(router.settle(retry, output_tokens=1000))
    left = (await settle(tenants.peek("t"))).axis("tokens").remaining
    # the first route's 2,000 has drained in the wait (45 s at 10,000 a minute): 1,500 left
    # charged by the retry (10,000 before: it went through uncharged)
    assert left == 10000 - 1500


def test_a_fair_share_reserve_under_a_settled_id_is_a_new_request() -> None:
    """The same for a fair share's reservation."""
    fair = FairShare(MemoryStore(clock=ManualClock()), "60000/minute", {"a": 1})
    first = fair.reserve("pool", "a", 1000, reservation_id="r1")
    assert fair.cancel(first).status == "settled"
    again = fair.reserve("pool", "a", 1000, reservation_id="r1")
    assert again and not again.replayed
    assert again.decision.remaining == 59000


def test_merged_refunds_answer_alike_on_redis_and_in_memory(redis_server: RedisServer) -> None:
    """Forty reservations open at once, settled in a random order with random usage, and
    more reserved in between: past 8 refunds an axis merges them (toward the older), and
    the script and its pure twin keep the same refunds, answer every call alike and
    admit no more than the budget (the hypothesis test in test_budget_properties holds
    the bound itself)."""
    limits = {"tokens": Rate(100_000, 60)}
    clock = ManualClock()
    client = redis_server.client()
    client.flushall()
    memory = TokenBudget(MemoryStore(clock=clock), limits, max_output_tokens=2000)
    remote = TokenBudget(
        RedisStore(client, clock=clock, timeout=1.0), limits, max_output_tokens=2000
    )
    rng = random.Random(21)
    held: list[tuple[object, object]] = []
    pairs = 0
    for step in range(400):
        roll = rng.random()
        if roll < 0.45 or not held:
            tokens = rng.choice([0, 100, 700])
            rid = f"r{step}"
            pair = (
                memory.reserve("k", tokens, reservation_id=rid),
                remote.reserve("k", tokens, reservation_id=rid),
            )
            assert pair[0] == pair[1], step
            if pair[0]:
                held.append(pair)
        elif roll < 0.9:
            mine, theirs = held.pop(rng.randrange(len(held)))
            used = rng.choice([0, 50, 900, 2500])
            assert memory.settle(mine, output_tokens=used) == remote.settle(
                theirs, output_tokens=used
            ), step
        else:
            clock.advance_us(rng.choice([1, 50_000, 700_000, 30_000_000]))
        raw = [key for key in client.keys("*") if b":tokens:" in key]
        for key in raw:
            words = (client.get(key) or b"").split()
            assert len(words) <= 4 + 2 * 8, words
            pairs = max(pairs, (len(words) - 4) // 2)
        assert memory.peek("k") == remote.peek("k"), step
    assert pairs == 8  # the merge was reached
