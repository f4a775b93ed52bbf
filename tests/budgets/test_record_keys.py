"""A reservation record belongs to one budget: two budgets (or two fair-share pools at
different rates) on one key, reserved under one id, each charge and settle their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratewarden import MemoryStore
from ratewarden.budgets import AsyncFairShare, FairShare, TokenBudget, Usage
from tests.budgets.conftest import Harness, settle


def _tokens(decision: Any) -> int:
    return int(decision.axis("tokens").remaining)


async def test_a_minute_and_a_day_budget_on_one_key_and_id_are_each_charged(
    stores: Callable[..., Harness],
) -> None:
    """tokens/min and tokens/day need two budgets on one tenant key; a gateway reuses the
    request id as the reservation id. Each is charged 1,500 and settled on its own record."""
    h = stores()
    minute = h.budget({"tokens": "10000/minute"}, max_output_tokens=1000)
    day = h.budget({"tokens": "50000/day"}, max_output_tokens=1000)
    a = await settle(minute.reserve("tenant:acme", 500, 1000, reservation_id="req-42"))
    b = await settle(day.reserve("tenant:acme", 500, 1000, reservation_id="req-42"))
    assert (a.allowed, a.replayed, _tokens(a.decision)) == (True, False, 8500)
    assert (b.allowed, b.replayed, _tokens(b.decision)) == (True, False, 48500)
    # A replay is the budget's own: each sees its own record, and charges nothing.
    again = await settle(day.reserve("tenant:acme", 500, 1000, reservation_id="req-42"))
    assert again.replayed and _tokens(again.decision) == 48500
    done_a = await settle(minute.settle(a, output_tokens=200))
    done_b = await settle(day.settle(b, output_tokens=200))
    assert (done_a.status, done_a.refunded) == ("settled", {"tokens": 800})
    assert (done_b.status, done_b.refunded) == ("settled", {"tokens": 800})
    assert (_tokens(done_a.decision), _tokens(done_b.decision)) == (9300, 49_300)


async def test_settle_id_finds_the_record_of_its_own_budget_only(
    stores: Callable[..., Harness],
) -> None:
    """settle_id from another instance of the same budget finds the record; a budget with
    another rate on the same key and id does not (it has none: 'unknown', nothing changed)."""
    h = stores()
    minute = h.budget({"requests": "10/minute", "tokens": "10000/minute"}, max_output_tokens=1000)
    same = h.budget({"requests": "10/minute", "tokens": "10000/minute"}, max_output_tokens=1000)
    other = h.budget({"requests": "10/minute", "tokens": "20000/minute"}, max_output_tokens=1000)
    await settle(minute.reserve("tenant:acme", 500, 1000, reservation_id="req-7"))
    lost = await settle(other.settle_id("tenant:acme", "req-7", Usage(500, 0)))
    assert lost.status == "unknown" and lost.refunded == {"requests": 0, "tokens": 0}
    found = await settle(same.settle_id("tenant:acme", "req-7", Usage(500, 100)))
    assert (found.status, found.refunded) == ("settled", {"requests": 0, "tokens": 900})


async def test_two_pools_at_different_rates_on_one_key_keep_a_record_each(
    stores: Callable[..., Harness],
) -> None:
    """A fair share at 60,000/minute and one at 1,000,000/hour on one pool key, one tenant, one
    id: both are charged, and each settles its own record."""
    h = stores()
    cls = AsyncFairShare if h.is_async else FairShare
    minute = cls(h.store, "60000/minute", {"a": 1})
    hour = cls(h.store, "1000000/hour", {"a": 1})
    x = await settle(minute.reserve("p", "a", 1000, reservation_id="r"))
    y = await settle(hour.reserve("p", "a", 1000, reservation_id="r"))
    assert (x.replayed, x.decision.remaining) == (False, 59_000)
    assert (y.replayed, y.decision.remaining) == (False, 999_000)
    done_x = await settle(minute.settle(x, 400))
    done_y = await settle(hour.settle_id("p", "a", "r", 100))
    assert (done_x.status, done_x.refunded) == ("settled", {"pool": 600, "tenant": 600})
    assert (done_y.status, done_y.refunded) == ("settled", {"pool": 900, "tenant": 900})


def test_every_key_of_one_decision_carries_the_budget_keys_hash_tag() -> None:
    """The record key names the axes and rates and the id, under the key's hash tag, so one
    budget's reserve stays one Cluster slot (the Cluster runs above prove the script runs)."""
    budget = TokenBudget(
        MemoryStore(), {"requests": "10/minute", "tokens": "10000/minute"}, max_output_tokens=10
    )
    *axes, record = budget._keys("tenant:acme", "req:1")
    assert all(k.startswith("rw:{tenant:acme}:") for k in (*axes, record))
    assert record == (
        "rw:{tenant:acme}:budget-reservation:"
        "requests=10/60000000/10,tokens=10000/60000000/10000:req:1"
    )
    fair = FairShare(MemoryStore(), "60000/minute", {"a": 1})
    assert fair._record("pool", "a", "r") == (
        "rw:{pool}:fair-reservation:60000/60000000/60000:1:a:r"
    )
