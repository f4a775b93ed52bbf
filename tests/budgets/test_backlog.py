"""Usage a token budget could not charge while its store was down, paid once it is back.

The pure ``Backlog`` first; then ``TokenBudget`` and ``AsyncTokenBudget`` over a real
redis-server behind the fault proxy (``Fault.RESET``: every connection refused, so
a failed call never reached Redis). The stores run on a ManualClock, so no token
comes back while a test runs: every ``remaining`` below is exact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from ratewarden.budgets import AsyncTokenBudget, Backlog, TokenBudget, Usage
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._proxy import Fault, FaultProxy

pytestmark = pytest.mark.redis  # the pure Backlog tests first, then real redis-servers

LIMITS = {"tokens": "1000/minute"}


# --- the backlog alone ------------------------------------------------------------------


def test_a_backlog_sums_what_each_key_owes_per_axis_and_hands_it_over_once() -> None:
    backlog = Backlog()
    assert backlog.owe("a", (3, 100))
    assert backlog.owe("b", (1, 5))
    assert backlog.owe("a", (1, 20))
    assert backlog.owing() == ["a", "b"] and len(backlog) == 2
    assert backlog.owed("a") == (4, 120)
    assert backlog.take("a") == (4, 120)
    assert backlog.take("a") is None and backlog.owed("a") is None
    assert backlog.owing() == ["b"]


def test_nothing_owed_is_not_kept() -> None:
    backlog = Backlog()
    assert backlog.owe("a", (0, 0))
    assert not backlog and backlog.owing() == []


def test_a_full_backlog_drops_new_keys_counts_them_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backlog = Backlog(max_keys=2)
    assert backlog.owe("a", (1,)) and backlog.owe("b", (1,))
    with caplog.at_level(logging.WARNING, logger="ratewarden.budgets"):
        assert not backlog.owe("c", (5,))
        assert not backlog.owe("d", (5,))
        assert not backlog.owe("e", (5,))
    assert backlog.owe("a", (1,))  # a key already owed still adds up
    assert backlog.owed("a") == (2,) and backlog.owed("c") is None
    assert backlog.dropped == 3
    # The first and second drops are logged, the third is not (1, 2, 4, 8, ...).
    full = "token budget backlog full (2 keys owed): charges dropped so far:"
    assert [r.getMessage() for r in caplog.records] == [f"{full} 1", f"{full} 2"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_max_keys_must_be_a_whole_number_of_at_least_one(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_keys"):
        Backlog(max_keys=bad)  # type: ignore[arg-type]


def test_a_backlog_belongs_to_one_budget() -> None:
    store = MemoryStore(clock=ManualClock())
    backlog = Backlog()
    TokenBudget(store, LIMITS, max_output_tokens=10, backlog=backlog)
    with pytest.raises(ConfigurationError, match="belongs to another budget"):
        TokenBudget(store, LIMITS, max_output_tokens=10, backlog=backlog)
    with pytest.raises(ConfigurationError, match="must be a Backlog"):
        TokenBudget(store, LIMITS, max_output_tokens=10, backlog={})  # type: ignore[arg-type]


def test_owe_needs_a_backlog_a_usage_and_a_key() -> None:
    store = MemoryStore(clock=ManualClock())
    plain = TokenBudget(store, LIMITS, max_output_tokens=10)
    with pytest.raises(ConfigurationError, match="backlog=Backlog"):
        plain.owe("t", Usage(0, 5, 0))
    owing = TokenBudget(store, LIMITS, max_output_tokens=10, backlog=Backlog())
    with pytest.raises(ConfigurationError, match="Usage"):
        owing.owe("t", 5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="key"):
        owing.owe("", Usage(0, 5, 0))
    assert not owing.backlog


# --- a budget over Redis, through an outage ---------------------------------------------


@pytest.fixture
def proxy(make_redis: object) -> Iterator[FaultProxy]:
    server: RedisServer = make_redis()  # type: ignore[operator]
    proxy = FaultProxy(server.port)
    yield proxy
    proxy.close()


def _budget(proxy: FaultProxy, backlog: Backlog | None) -> TokenBudget:
    store = RedisStore.from_url(proxy.url, clock=ManualClock(), timeout=5.0)
    return TokenBudget(store, LIMITS, max_output_tokens=500, backlog=backlog)


def _left(budget: TokenBudget, key: str) -> int:
    return budget.peek(key).axes[0].remaining


def test_a_charge_the_store_refused_is_owed_and_paid_before_the_next_look(
    proxy: FaultProxy,
) -> None:
    budget = _budget(proxy, Backlog())
    assert budget.charge("acme", Usage(0, 100, 0)).charged == {"tokens": 100}
    proxy.set_fault(Fault.RESET)
    for _ in range(2):
        with pytest.raises(StorageUnavailableError):
            budget.charge("acme", Usage(0, 150, 0))
    assert budget.backlog is not None and budget.backlog.owed("acme") == (300,)
    with pytest.raises(StorageUnavailableError):  # a look while down pays nothing, loses nothing
        budget.peek("acme")
    assert budget.backlog.owed("acme") == (300,)
    proxy.set_fault(Fault.NONE)
    assert _left(budget, "acme") == 1000 - 100 - 300
    assert not budget.backlog
    budget.store.close()


def test_without_a_backlog_the_tokens_spent_in_an_outage_are_lost(proxy: FaultProxy) -> None:
    """What the backlog is for: the same charges, and the budget never hears of them."""
    budget = _budget(proxy, None)
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.charge("acme", Usage(0, 300, 0))
    proxy.set_fault(Fault.NONE)
    assert _left(budget, "acme") == 1000
    budget.store.close()


def test_the_next_charge_pays_what_is_owed_in_the_same_store_step(proxy: FaultProxy) -> None:
    budget = _budget(proxy, Backlog())
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.charge("acme", Usage(0, 300, 0))
    proxy.set_fault(Fault.NONE)
    charge = budget.charge("acme", Usage(0, 50, 0))
    assert charge.charged == {"tokens": 350}  # what was owed, and this charge
    assert charge.decision.axes[0].remaining == 650
    assert budget.backlog is not None and not budget.backlog
    budget.store.close()


def test_a_reserve_pays_what_is_owed_first(proxy: FaultProxy) -> None:
    """700 tokens owed: an estimate of 400 no longer fits in the 300 left."""
    budget = _budget(proxy, Backlog())
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.charge("acme", Usage(0, 700, 0))
    proxy.set_fault(Fault.NONE)
    assert not budget.reserve("acme", input_tokens=100, max_output_tokens=300)
    assert budget.reserve("acme", input_tokens=100, max_output_tokens=200)
    assert _left(budget, "acme") == 0
    budget.store.close()


def test_replay_pays_every_key_owed_and_stops_at_a_failure(proxy: FaultProxy) -> None:
    budget = _budget(proxy, Backlog())
    proxy.set_fault(Fault.RESET)
    for key, tokens in (("a", 10), ("b", 20), ("c", 30)):
        with pytest.raises(StorageUnavailableError):
            budget.charge(key, Usage(0, tokens, 0))
    with pytest.raises(StorageUnavailableError):
        budget.replay()
    assert budget.backlog is not None and budget.backlog.owing() == ["b", "c", "a"]
    proxy.set_fault(Fault.NONE)
    assert budget.replay(max_keys=2) == 2
    assert budget.backlog.owing() == ["a"]
    assert budget.replay() == 1 and budget.replay() == 0
    assert [_left(budget, key) for key in "abc"] == [990, 980, 970]
    budget.store.close()


def test_a_settle_the_store_refused_owes_only_the_overrun(proxy: FaultProxy) -> None:
    """Reserved 500 (100 in, 400 out); the answer used 1,000: the reservation stays charged,
    and the 500 beyond it are owed."""
    budget = _budget(proxy, Backlog())
    reservation = budget.reserve("acme", input_tokens=100, max_output_tokens=400)
    assert reservation
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.settle(reservation, output_tokens=900)
    assert budget.backlog is not None and budget.backlog.owed("acme") == (500,)
    proxy.set_fault(Fault.NONE)
    assert _left(budget, "acme") == 0
    budget.store.close()


def test_a_settle_under_its_estimate_owes_nothing(proxy: FaultProxy) -> None:
    budget = _budget(proxy, Backlog())
    reservation = budget.reserve("acme", input_tokens=100, max_output_tokens=400)
    proxy.set_fault(Fault.RESET)
    with pytest.raises(StorageUnavailableError):
        budget.settle(reservation, output_tokens=10)
    assert budget.backlog is not None and not budget.backlog
    budget.store.close()


def test_the_asyncio_twin_owes_and_pays_the_same(proxy: FaultProxy) -> None:
    async def run() -> tuple[int, int, int]:
        store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=5.0)
        budget = AsyncTokenBudget(store, LIMITS, max_output_tokens=500, backlog=Backlog())
        try:
            proxy.set_fault(Fault.RESET)
            for key in ("a", "b"):
                with pytest.raises(StorageUnavailableError):
                    await budget.charge(key, Usage(0, 200, 0))
            proxy.set_fault(Fault.NONE)
            left_a = (await budget.peek("a")).axes[0].remaining  # paid by the look
            paid = await budget.replay()
            left_b = (await budget.peek("b")).axes[0].remaining
            return left_a, paid, left_b
        finally:
            await store.aclose()

    assert asyncio.run(run()) == (800, 1, 800)


def test_a_cancelled_charge_keeps_what_was_owed(proxy: FaultProxy) -> None:
    """A charge that pays the backlog, cancelled while it waits on a store that never
    answers: the tokens it was paying are owed again."""

    async def run() -> tuple[int, ...] | None:
        store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=5.0)
        budget = AsyncTokenBudget(store, LIMITS, max_output_tokens=500, backlog=Backlog())
        try:
            assert budget.owe("acme", Usage(0, 40, 0))
            proxy.set_fault(Fault.BLACKHOLE)
            task = asyncio.ensure_future(budget.charge("acme", Usage(0, 5, 0)))
            assert budget.backlog is not None
            for _ in range(1000):  # until the charge has taken what was owed, and waits
                await asyncio.sleep(0)
                if not budget.backlog:
                    break
            assert not budget.backlog and not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return budget.backlog.owed("acme")
        finally:
            proxy.set_fault(Fault.NONE)
            await store.aclose()

    assert asyncio.run(run()) == (40,)
