"""Failure policies and the circuit breaker with a real redis-server stopped mid-test.

Redis is killed (SIGKILL) between two phases of hits and later restarted on the
same port; a black-holing TCP proxy stands in for a hung Redis, where every
store call costs the whole timeout. Time for the breaker and the scripts comes
from one ManualClock; the store's own timeout bounds each failing call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from ratewarden import Decision, Rate
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, CircuitBreaker, TwoTier
from tests._servers import RedisServer
from tests.faults._proxy import Fault, FaultProxy
from tests.tiers._helpers import Recorder

pytestmark = pytest.mark.redis

#: Seconds each store call may wait for Redis (the fault tests use the same).
TIMEOUT = 0.05
RATE = Rate.parse("4/minute")
COOLDOWN = 5.0


class Counted:
    """A real Redis store whose hits are counted on the way through."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.clock = store.clock
        self.calls = 0

    def hit(self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1) -> Any:
        self.calls += 1
        return self.store.hit(algorithm, key, rates, cost)

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> Any:
        return self.store.reset(algorithm, key, rates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def kill(server: RedisServer) -> None:
    """SIGKILL: no shutdown, no goodbye to clients."""
    server.process.kill()
    server.process.wait(5)


def build(
    url: str, mode: str, clock: ManualClock, *, sync: bool = True
) -> tuple[Any, Counted, Recorder]:
    metrics = Recorder()
    breaker = CircuitBreaker(failures=3, cooldown=COOLDOWN, clock=clock, metrics=metrics)
    if sync:
        store = Counted(RedisStore.from_url(url, clock=clock, timeout=TIMEOUT))
        tiers: Any = TwoTier(store, failure_mode=mode, breaker=breaker, metrics=metrics, name=mode)
    else:
        store = Counted(AsyncRedisStore.from_url(url, clock=clock, timeout=TIMEOUT))
        tiers = AsyncTwoTier(store, failure_mode=mode, breaker=breaker, metrics=metrics, name=mode)
    return tiers, store, metrics


#: What ten requests for a fresh key see while Redis is dead, per policy.
EXPECTED_DOWN = {
    "open": [True] * 10,
    "closed": [False] * 10,
    "local": [True] * 4 + [False] * 6,  # this process's own bucket at the global 4/minute
}


def check_down(mode: str, down: list[Decision], store: Counted, calls_before: int) -> None:
    assert [d.allowed for d in down] == EXPECTED_DOWN[mode]
    assert {d.degraded for d in down} == {mode}
    # Three failed calls opened the breaker; the other seven never reached the store.
    assert store.calls - calls_before == 3


@pytest.mark.parametrize("mode", ["open", "closed", "local"])
def test_each_policy_answers_while_redis_is_dead_and_redis_answers_again_after(
    mode: str, make_redis: Callable[..., RedisServer]
) -> None:
    """Healthy, killed, restarted: the store decides, then the policy, then the store again
    once a probe after the cool-down finds it back."""
    server = make_redis()
    clock = ManualClock()
    tiers, store, metrics = build(server.url, mode, clock)
    healthy = [tiers.hit("k", RATE) for _ in range(2)]
    assert [(d.allowed, d.degraded, d.remaining) for d in healthy] == [(True, "", 3), (True, "", 2)]
    kill(server)
    calls = store.calls
    check_down(mode, [tiers.hit("fresh", RATE) for _ in range(10)], store, calls)
    assert tiers.breaker.state == "open"
    assert len(metrics.degraded_calls) == 10
    reasons = {reason for _, _, reason in metrics.degraded_calls}
    assert reasons == {"StorageUnavailableError", "breaker_open"}
    make_redis(port=server.port)
    clock.advance(COOLDOWN)
    back = tiers.hit("k", RATE)
    assert back.degraded == "" and back.allowed
    assert back.remaining == 3  # no persistence: the restarted Redis counts from zero
    assert tiers.breaker.state == "closed"
    assert [state for _, state in metrics.breakers] == ["open", "half_open", "closed"]
    store.store.close()


@pytest.mark.parametrize("mode", ["open", "closed", "local"])
async def test_asyncio_each_policy_answers_while_redis_is_dead(
    mode: str, make_redis: Callable[..., RedisServer]
) -> None:
    """AsyncTwoTier over AsyncRedisStore: the same three phases."""
    server = make_redis()
    clock = ManualClock()
    tiers, store, metrics = build(server.url, mode, clock, sync=False)
    healthy = [await tiers.hit("k", RATE) for _ in range(2)]
    assert [(d.allowed, d.degraded) for d in healthy] == [(True, ""), (True, "")]
    kill(server)
    calls = store.calls
    check_down(mode, [await tiers.hit("fresh", RATE) for _ in range(10)], store, calls)
    make_redis(port=server.port)
    clock.advance(COOLDOWN)
    back = await tiers.hit("k", RATE)
    assert back.degraded == "" and back.remaining == 3
    assert [state for _, state in metrics.breakers] == ["open", "half_open", "closed"]
    await store.store.aclose()


@pytest.fixture
def hung_redis(make_redis: Callable[..., RedisServer]) -> Iterator[FaultProxy]:
    """A redis-server behind a proxy the test can turn into a black hole."""
    server = make_redis()
    proxy = FaultProxy(server.port)
    yield proxy
    proxy.close()


def test_while_open_a_hung_redis_costs_no_timeouts(hung_redis: FaultProxy) -> None:
    """A black-holed Redis: each failing call waits the whole timeout, so only the three that
    open the breaker do; the next 500 requests make no store call at all, and when the proxy
    heals, one probe closes the breaker."""
    clock = ManualClock()
    tiers, store, _ = build(hung_redis.url, "local", clock)
    assert tiers.hit("k", RATE).degraded == ""
    hung_redis.set_fault(Fault.BLACKHOLE)
    calls = store.calls
    during = [tiers.hit("k", RATE) for _ in range(503)]
    assert store.calls - calls == 3, "requests paid the timeout while the breaker was open"
    assert {d.degraded for d in during} == {"local"}
    hung_redis.set_fault(Fault.NONE)
    clock.advance(COOLDOWN)
    assert tiers.hit("k", RATE).degraded == ""
    assert tiers.breaker.state == "closed"
    store.store.close()


def test_a_probe_into_a_still_dead_redis_reopens_for_another_cooldown(
    make_redis: Callable[..., RedisServer],
) -> None:
    """After the cool-down one probe goes out; Redis is still dead, so the breaker opens again
    and the next cool-down's worth of requests makes no call."""
    server = make_redis()
    clock = ManualClock()
    tiers, store, metrics = build(server.url, "closed", clock)
    tiers.hit("k", RATE)
    kill(server)
    for _ in range(3):
        tiers.hit("k", RATE)
    clock.advance(COOLDOWN)
    calls = store.calls
    for _ in range(50):
        assert tiers.hit("k", RATE).degraded == "closed"
    assert store.calls - calls == 1
    assert [state for _, state in metrics.breakers] == ["open", "half_open", "open"]
    store.store.close()
