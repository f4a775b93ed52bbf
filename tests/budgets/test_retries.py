"""A retried call charges once: a router's reserve under the same id, a settle the store
failed.

The router's retry runs on every store (memory, Redis, Cluster, sync and async); the
settle retries on a real redis-server behind the fault proxy (``Fault.RESET``: the failed
settle never reached Redis). A settle that failed for the caller but ran is played by a
second budget settling the same record by id. ManualClock everywhere: no token comes back
by time while a test runs, so every ``remaining`` is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ratewarden import Rate
from ratewarden.budgets import (
    Account,
    AsyncBudgetRouter,
    Backlog,
    BudgetRouter,
    TokenBudget,
    Usage,
)
from ratewarden.errors import StorageUnavailableError
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.budgets.conftest import Harness, settle
from tests.faults._proxy import Fault, FaultProxy


def _tokens_left(decision: Any) -> int:
    return int(decision.axis("tokens").remaining)


def _routes(h: Harness, tenant: bool) -> tuple[Any, Any, Any]:
    tenants = h.budget({"tokens": "100000/minute"}, max_output_tokens=4096)
    one_a_minute = {"requests": Rate.parse("60/minute", burst=1), "tokens": "400000/minute"}
    primary = h.budget(one_a_minute, max_output_tokens=4096)
    fallback = h.budget({"tokens": "200000/minute"}, max_output_tokens=4096)
    cls = AsyncBudgetRouter if h.is_async else BudgetRouter
    ups = [Account("primary", primary, "up:primary"), Account("fallback", fallback, "up:fallback")]
    router = cls(Account("tenant", tenants, "tenant:acme") if tenant else None, ups)
    return router, primary, fallback


@pytest.mark.parametrize("tenant", [True, False], ids=["tenant", "no-tenant"])
async def test_a_router_retry_goes_back_to_the_upstream_holding_its_id(
    stores: Callable[..., Harness], tenant: bool
) -> None:
    """The first try went to the fallback (the primary had no request left); then the
    primary has room, and the same call is retried under the same id: it gets
    the fallback's reservation back, charging nothing (before: the primary was charged
    too, and the fallback's reservation, in no route, was never settled)."""
    h = stores()
    router, primary, fallback = _routes(h, tenant)
    busy = await settle(primary.reserve("up:primary", 10))  # its one request a minute
    first = await settle(router.reserve(input_tokens=1000, reservation_id="req-42"))
    assert first.upstream == "fallback"
    await settle(primary.cancel(busy))  # room again, exactly (no time passes)
    again = await settle(router.reserve(input_tokens=1000, reservation_id="req-42"))
    assert again.upstream == "fallback" and again.reservation.replayed
    assert again.tenant is None or again.tenant.replayed
    done = await settle(router.settle(again, output_tokens=100))
    assert [s.status for s in done if s is not None] == ["settled"] * (2 if tenant else 1)
    assert _tokens_left(await settle(fallback.peek("up:fallback"))) == 200_000 - 1100
    primary_left = await settle(primary.peek("up:primary"))
    assert _tokens_left(primary_left) == 400_000 and primary_left.axis("requests").remaining == 1
    # A new id is a new request: the primary, with room again, takes it.
    other = await settle(router.reserve(input_tokens=1000, reservation_id="req-43"))
    assert other.upstream == "primary"


# --- a settle retried after the store failed it, with a backlog ---------------------------


@pytest.fixture
def proxy(make_redis: Callable[..., RedisServer]) -> Iterator[FaultProxy]:
    proxy = FaultProxy(make_redis().port)
    yield proxy
    proxy.close()


def _budget(url: str) -> TokenBudget:
    # Fault.RESET fails at once, so no call here waits for the timeout; a short one only
    # made the reconnect after the fault fail on a loaded CI machine.
    store = RedisStore.from_url(url, clock=ManualClock(), timeout=5.0)
    return TokenBudget(store, {"tokens": "10000/minute"}, max_output_tokens=1000, backlog=Backlog())


@pytest.mark.redis
@pytest.mark.parametrize("paid_first", [False, True], ids=["retried", "backlog-paid-first"])
def test_a_settle_retried_after_the_store_refused_it_charges_the_overrun_once(
    proxy: FaultProxy, paid_first: bool
) -> None:
    """1,000 reserved, 3,000 used: the settle fails (the store refuses connections) and
    its 2,000 overrun is owed; the retry, once the store is back, settles it. 7,000 are
    left whether the backlog was paid before the retry or after (before: 5,000, the
    overrun charged by the retry and again by the backlog)."""
    budget = _budget(proxy.url)
    reservation = budget.reserve("acme", 0, 1000)
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.settle(reservation, output_tokens=3000)
    with pytest.raises(StorageUnavailableError):  # a second failure owes nothing more
        budget.settle(reservation, output_tokens=3000)
    assert budget.backlog is not None and budget.backlog.owed("acme") == (2000,)
    proxy.set_fault(Fault.NONE)
    if paid_first:
        assert _tokens_left(budget.peek("acme")) == 7000
    again = budget.settle(reservation, output_tokens=3000)
    assert again.status == "settled" and again.refunded == {"tokens": 0}
    assert _tokens_left(budget.peek("acme")) == 7000
    assert budget.settle(reservation, output_tokens=3000).status == "already-settled"
    assert _tokens_left(budget.peek("acme")) == 7000 and not budget.backlog
    budget.store.close()


@pytest.mark.redis
def test_a_settle_that_failed_but_ran_is_not_charged_again_by_the_backlog(
    proxy: FaultProxy,
) -> None:
    """A settle whose reply was lost (a timeout after Redis ran it) leaves the caller with
    StorageUnavailableError and the overrun owed, while the store has settled it. Here
    the failed settle is refused, and the store then settles the same record by id, as
    the lost one would have. The retry finds it settled, and what is owed of it is taken
    back: 7,000 left, not 5,000."""
    budget = _budget(proxy.url)
    reservation = budget.reserve("acme", 0, 1000)
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.settle(reservation, output_tokens=3000)
    assert budget.backlog is not None and budget.backlog.owed("acme") == (2000,)
    proxy.set_fault(Fault.NONE)
    ran = TokenBudget(budget.store, {"tokens": "10000/minute"}, max_output_tokens=1000)
    assert ran.settle_id("acme", reservation.reservation_id, Usage(0, 3000)).status == "settled"
    assert budget.settle(reservation, output_tokens=3000).status == "already-settled"
    assert not budget.backlog
    assert _tokens_left(budget.peek("acme")) == 7000
    budget.store.close()
