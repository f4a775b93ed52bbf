"""A cancelled asyncio reserve leaves nothing charged: the router's and the budget's.

A caller gives up on a reserve (``wait_for``, a client gone, a shutdown) while the
store is slow; the store still runs the script it was sent. The reserve cancels by
id what it charged, and what the call in flight may have charged, before the
CancelledError goes on. Real redis-servers held with ``CLIENT PAUSE`` (the script is
sent and runs once the pause ends, as on a slow store), on a ManualClock so that no
token comes back by time while a test runs: every ``remaining`` below is exact.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
import redis

from ratewarden.budgets import Account, AsyncBudgetRouter, AsyncTokenBudget, _twins
from ratewarden.limiter import _undo
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._proxy import Fault, FaultProxy

pytestmark = pytest.mark.redis


@pytest.fixture
def server(make_redis: Callable[..., RedisServer]) -> Iterator[RedisServer]:
    yield make_redis()


def _left(decision: object) -> int:
    return decision.axis("tokens").remaining  # type: ignore[attr-defined,no-any-return]


async def _cancel_while_paused(
    server: RedisServer, call: object, started: Callable[[], Awaitable[bool]] | None = None
) -> None:
    """Run ``call`` with every client of ``server`` paused for 0.6 s, cancel it once
    ``started()`` holds and its store call is written (waiting on the pause), then wait
    for it: once the pause ends, the script runs, and then the undo sent after it."""
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("CLIENT", "PAUSE", 600, "ALL")
    admin.close()
    task = asyncio.ensure_future(call)  # type: ignore[call-overload]
    for _ in range(100):
        await asyncio.sleep(0.001)
        if started is None or await started():
            break
    await asyncio.sleep(0.05)  # the store's call is written, and waits on the pause
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancelled_route_gives_the_tenant_and_the_upstream_back(
    server: RedisServer,
) -> None:
    """The tenant reserved (on memory), the upstream's script sent (on a paused Redis),
    then the call cancelled: after it, both hold nothing (before, both kept 4,000)."""
    clock = ManualClock(1_700_000_000.0)
    tenants = AsyncTokenBudget(
        AsyncMemoryStore(clock=clock), {"tokens": "10000/minute"}, max_output_tokens=4000
    )
    store = AsyncRedisStore.from_url(server.url, clock=clock, timeout=5.0)
    upstream = AsyncTokenBudget(store, {"tokens": "50000/minute"}, max_output_tokens=4000)
    router = AsyncBudgetRouter(Account("tenant", tenants, "acme"), [Account("up", upstream, "up")])
    try:
        assert _left(await upstream.peek("up")) == 50_000  # connected before the pause

        async def tenant_charged() -> bool:
            return _left(await tenants.peek("acme")) == 6_000

        call = router.reserve(input_tokens=0, max_output_tokens=4000, reservation_id="req-9")
        await _cancel_while_paused(server, call, tenant_charged)
        assert _left(await tenants.peek("acme")) == 10_000
        assert _left(await upstream.peek("up")) == 50_000
    finally:
        await store.aclose()


async def test_a_cancelled_budget_reserve_cancels_its_record_by_id(server: RedisServer) -> None:
    """A reserve with no id of the caller's, cancelled while its script waits on a paused
    Redis: the script runs, and the reservation it made is cancelled (before: 4,000 of
    10,000 stayed charged, held by nobody)."""
    clock = ManualClock(1_700_000_000.0)
    store = AsyncRedisStore.from_url(server.url, clock=clock, timeout=5.0)
    budget = AsyncTokenBudget(store, {"tokens": "10000/minute"}, max_output_tokens=4000)
    try:
        assert _left(await budget.peek("acme")) == 10_000
        await _cancel_while_paused(server, budget.reserve("acme", 0, 4000))
        assert _left(await budget.peek("acme")) == 10_000
    finally:
        await store.aclose()


async def test_a_replayed_reserve_cancelled_leaves_the_first_calls_reservation(
    server: RedisServer,
) -> None:
    """What a call did not charge is not its to cancel: a router retry whose every step
    was a replay (the first call's route stands), cancelled afterwards, keeps the route."""
    clock = ManualClock(1_700_000_000.0)
    store = AsyncRedisStore.from_url(server.url, clock=clock, timeout=5.0)
    tenants = AsyncTokenBudget(store, {"tokens": "10000/minute"}, max_output_tokens=4000)
    upstream = AsyncTokenBudget(store, {"tokens": "50000/minute"}, max_output_tokens=4000)
    router = AsyncBudgetRouter(Account("tenant", tenants, "acme"), [Account("up", upstream, "up")])
    try:
        first = await router.reserve(input_tokens=0, max_output_tokens=4000, reservation_id="r")
        assert first.allowed and not first.tenant.replayed
        again = await router.reserve(input_tokens=0, max_output_tokens=4000, reservation_id="r")
        assert again.tenant.replayed and again.reservation.replayed
        assert _left(await tenants.peek("acme")) == 6_000
        assert _left(await upstream.peek("up")) == 46_000
    finally:
        await store.aclose()


async def test_the_undo_of_a_cancelled_reserve_waits_on_a_silent_store_a_bounded_time(
    make_redis: Callable[..., RedisServer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store that never answers (a black hole) holds the cancellation up for
    ``UNDO_WAIT`` seconds at most, not for the store's timeout; the undo that could not
    finish is logged once it fails."""
    monkeypatch.setattr(_twins, "UNDO_WAIT", 0.2)
    proxy = FaultProxy(make_redis().port)
    store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=1.0)
    budget = AsyncTokenBudget(store, {"tokens": "10000/minute"}, max_output_tokens=4000)
    try:
        await budget.peek("acme")
        proxy.set_fault(Fault.BLACKHOLE)
        task = asyncio.ensure_future(budget.reserve("acme", 0, 4000))
        await asyncio.sleep(0.05)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 0.6
        with caplog.at_level(logging.WARNING, logger="ratewarden.budgets"):
            for _ in range(300):  # the undo runs on until the store's timeout (1 s)
                if not _undo._UNDOING:
                    break
                await asyncio.sleep(0.01)
        assert not _undo._UNDOING
        assert [r.event for r in caplog.records] == ["budget_undo_failed"]  # type: ignore[attr-defined]
    finally:
        proxy.set_fault(Fault.NONE)
        await store.aclose()
        proxy.close()
