"""TokenBudget on every store: reserve/settle arithmetic, all-or-nothing, idempotency, bad input."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ratewarden import ConfigurationError
from ratewarden.budgets import Usage
from tests.budgets.conftest import Harness, settle

TOKENS = {"tokens": "10000/minute"}


async def test_worked_example_reserve_4000_settle_1500_leaves_8500(
    stores: Callable[..., Harness],
) -> None:
    """10,000 tokens/min: reserve 4,000, settle at 1,500 -> 8,500 available at once, never more."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=3000)
    reservation = await settle(budget.reserve("tenant:a", input_tokens=1000))
    assert reservation.allowed and reservation.costs == (4000,)
    assert reservation.decision.axis("tokens").remaining == 6000
    h.clock.advance_us(1)  # well within one emission interval (6 ms)
    done = await settle(budget.settle(reservation, output_tokens=500))
    assert done.status == "settled" and done.refunded == {"tokens": 2500}
    assert done.decision.axis("tokens").remaining == 8500
    assert (await settle(budget.peek("tenant:a"))).axis("tokens").remaining == 8500
    for _ in range(4):
        h.clock.advance(30)
        assert (await settle(budget.peek("tenant:a"))).axis("tokens").remaining <= 10000
    assert (await settle(budget.peek("tenant:a"))).axis("tokens").remaining == 10000


async def test_axes_are_all_or_nothing(stores: Callable[..., Harness]) -> None:
    """A request the requests axis denies charges no tokens, and the reverse."""
    h = stores()
    budget = h.budget({"requests": "2/minute", "tokens": "10000/minute"}, max_output_tokens=100)
    assert await settle(budget.reserve("k", input_tokens=100))
    assert await settle(budget.reserve("k", input_tokens=100))
    denied = await settle(budget.reserve("k", input_tokens=100))
    assert not denied.allowed
    assert denied.decision.axis("requests").retry_after == pytest.approx(30.0)
    assert denied.decision.axis("tokens").allowed
    assert (await settle(budget.peek("k"))).axis("tokens").remaining == 10000 - 400
    too_big = await settle(budget.reserve("k2", input_tokens=20_000))
    assert not too_big.allowed and too_big.decision.retry_after == float("inf")
    assert (await settle(budget.peek("k2"))).axis("requests").remaining == 2


async def test_settle_is_idempotent_by_id_and_reserve_replays(
    stores: Callable[..., Harness],
) -> None:
    """Settling twice refunds once; reserving an open id again charges nothing; reserving
    the id of a settled reservation is a new request, charged afresh (it was a free pass:
    a router's retry after cancelling went through uncharged)."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=1000)
    first = await settle(budget.reserve("k", input_tokens=1000, reservation_id="req-1"))
    again = await settle(budget.reserve("k", input_tokens=1000, reservation_id="req-1"))
    assert first.allowed and not first.replayed
    assert again.allowed and again.replayed
    assert again.decision.axis("tokens").remaining == 8000
    one = await settle(budget.settle(first, output_tokens=0))
    two = await settle(budget.settle(again, output_tokens=0))
    assert (one.status, one.refunded["tokens"]) == ("settled", 1000)
    assert (two.status, two.refunded["tokens"]) == ("already-settled", 0)
    assert (await settle(budget.peek("k"))).axis("tokens").remaining == 9000
    after = await settle(budget.reserve("k", input_tokens=5, reservation_id="req-1"))
    assert after.allowed and not after.replayed
    assert after.decision.axis("tokens").remaining == 9000 - 1005
    assert (await settle(budget.settle(after, output_tokens=5))).status == "settled"


async def test_a_refund_stops_at_now_and_nothing_is_refunded_after_a_rest(
    stores: Callable[..., Harness],
) -> None:
    """Time already paid part of the charge back: only the rest is refunded, never below now."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=3000)
    reservation = await settle(budget.reserve("k", input_tokens=1000))  # 4000 = 24 s of rate
    h.clock.advance(20)  # 4 s (666.6 tokens) of the charge still ahead
    done = await settle(budget.settle(reservation, output_tokens=500))
    assert done.refunded["tokens"] == 666
    assert done.decision.axis("tokens").remaining == 10000
    late = await settle(budget.reserve("k", input_tokens=1000))
    h.clock.advance(60)
    assert (await settle(budget.settle(late, output_tokens=0))).refunded["tokens"] == 0


async def test_overrun_is_charged_up_to_an_empty_budget(stores: Callable[..., Harness]) -> None:
    """Using more than reserved charges the difference, but never past an empty budget."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=1000)
    reservation = await settle(budget.reserve("k", input_tokens=1000))
    done = await settle(budget.settle(reservation, output_tokens=3000))
    assert done.refunded["tokens"] == -2000
    assert done.decision.axis("tokens").remaining == 6000
    big = await settle(budget.reserve("k", input_tokens=1000))
    done = await settle(budget.settle(big, output_tokens=50_000))
    assert done.refunded["tokens"] == -4000
    state = done.decision.axis("tokens")
    assert state.remaining == 0 and state.reset_after == pytest.approx(60.0)


async def test_abandoned_reservation_record_expires_and_capacity_returns_by_time(
    stores: Callable[..., Harness],
) -> None:
    """Past its TTL a reservation cannot be settled; its charge has drained by then."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=3000, reservation_ttl=90)
    reservation = await settle(budget.reserve("k", input_tokens=1000))
    h.clock.advance(24)
    assert (await settle(budget.peek("k"))).axis("tokens").remaining == 10000
    h.clock.advance(70)
    late = await settle(budget.settle(reservation, output_tokens=10))
    assert late.status == "unknown" and late.refunded == {"tokens": 0}


async def test_custom_units_and_input_output_axes(stores: Callable[..., Harness]) -> None:
    """Each axis is charged its own amount: input, output, total tokens, requests, images."""
    h = stores()
    budget = h.budget(
        {
            "requests": "10/minute",
            "input_tokens": "5000/minute",
            "output_tokens": "2000/minute",
            "tokens": "6000/minute",
            "images": "4/minute",
        },
        max_output_tokens=500,
    )
    r = await settle(
        budget.reserve("k", input_tokens=300, max_output_tokens=900, units={"images": 2})
    )
    assert r.costs == (1, 300, 500, 800, 2)
    done = await settle(budget.settle(r, input_tokens=300, output_tokens=120, units={"images": 1}))
    assert done.refunded == {
        "requests": 0,
        "input_tokens": 0,
        "output_tokens": 380,
        "tokens": 380,
        "images": 1,
    }
    cancel = await settle(budget.reserve("k", input_tokens=100, units={"images": 0}))
    assert (await settle(budget.cancel(cancel))).refunded["requests"] == 1
    assert (await settle(budget.peek("k"))).axis("requests").remaining == 9


async def test_bad_input_is_a_configuration_error_and_changes_nothing(
    stores: Callable[..., Harness],
) -> None:
    """Bad axis names, counts, units and ids raise ConfigurationError; the store is untouched."""
    h = stores()
    for limits in ({}, {"Tokens": "1/s"}, {"tokens": "lots"}, {"tokens": 5}):
        with pytest.raises(ConfigurationError):
            h.budget(limits, max_output_tokens=1)
    with pytest.raises(ConfigurationError):
        h.budget(TOKENS, max_output_tokens=-1)
    with pytest.raises(ConfigurationError):
        h.budget(TOKENS, max_output_tokens=1, reservation_ttl=0)
    budget = h.budget({"tokens": "100/minute", "images": "5/minute"}, max_output_tokens=10)
    for call in (
        lambda: budget.reserve("k", input_tokens=-1),
        lambda: budget.reserve("k", input_tokens=True),
        lambda: budget.reserve("k", input_tokens=1),  # images needs a count
        lambda: budget.reserve("k", input_tokens=1, units={"images": 1, "video": 1}),
        lambda: budget.reserve("k", input_tokens=1, units={"images": 1}, reservation_id="a b"),
        lambda: budget.reserve("", input_tokens=1, units={"images": 1}),
        lambda: budget.settle("not a reservation", output_tokens=1),
    ):
        with pytest.raises(ConfigurationError):
            await settle(call())
    state = await settle(budget.peek("k"))
    assert [axis.remaining for axis in state.axes] == [100, 5]
    assert Usage.of(1, 2).amount("tokens") == 3


async def test_charge_records_usage_without_a_reservation_up_to_empty(
    stores: Callable[..., Harness],
) -> None:
    """Usage learnt afterwards is charged on every axis, never past an empty budget."""
    h = stores()
    budget = h.budget({"requests": "10/minute", "tokens": "1000/minute"}, max_output_tokens=0)
    first = await settle(budget.charge("k", Usage.of(0, 600, requests=1)))
    assert first.charged == {"requests": 1, "tokens": 600}
    assert first.decision.axis("tokens").remaining == 400
    second = await settle(budget.charge("k", Usage.of(0, 600, requests=0)))
    assert second.charged == {"requests": 0, "tokens": 400}
    assert second.decision.axis("tokens").remaining == 0
    assert not await settle(budget.reserve("k", input_tokens=1))


async def test_settle_by_id_alone_uses_the_charge_the_store_recorded(
    stores: Callable[..., Harness],
) -> None:
    """Another process knows only the key and the id: the refund comes from the store's record."""
    h = stores()
    budget = h.budget(TOKENS, max_output_tokens=3000)
    await settle(budget.reserve("k", input_tokens=1000, reservation_id="job-7"))
    other = h.budget(TOKENS, max_output_tokens=3000)  # e.g. a worker after a restart
    done = await settle(other.settle_id("k", "job-7", Usage.of(1000, 500)))
    assert done.status == "settled" and done.refunded == {"tokens": 2500}
    again = await settle(other.settle_id("k", "job-7", Usage.of(1000, 500)))
    assert again.status == "already-settled"
    assert (await settle(other.settle_id("k", "job-8", Usage.of(1, 1)))).status == "unknown"
    with pytest.raises(ConfigurationError):
        await settle(other.settle_id("k", "bad id", Usage.of(1, 1)))
