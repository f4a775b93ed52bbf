"""redis-server killed (SIGKILL) and restarted on the same port while load keeps running.

While it is down every call fails fast with StorageUnavailableError (never a
Decision); once it is back the store reconnects by itself. The test servers run
without persistence, so the restart loses every counter: that loss is the
expected, documented outcome of a Redis without AOF/RDB, and it is asserted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._load import TIMEOUT, Phase, arun, arun_while, run, run_while

pytestmark = [pytest.mark.faults, pytest.mark.redis]

LIMIT = 1000
RATE = Rate.parse(f"{LIMIT}/hour")
#: How long the server stays dead while the load goes on.
DOWN_S = 0.3


def kill(server: RedisServer) -> None:
    """SIGKILL: no shutdown, no goodbye to clients."""
    server.process.kill()
    server.process.wait(5)


def check(before: Phase, down: Phase, recovery: Phase, after: Phase, remaining: int) -> None:
    assert before.decided >= 20
    assert down.calls > 0 and down.decided == 0, "a dead Redis produced a Decision"
    assert recovery.unavailable < recovery.calls  # it ends with its first Decision
    assert after.decided == after.calls
    # No persistence: the restarted server counts from zero again.
    assert remaining == LIMIT - after.allowed - (recovery.allowed)


def test_sync_store_rides_out_a_killed_and_restarted_redis(
    make_redis: Callable[..., RedisServer],
) -> None:
    """RedisStore: fast failures while Redis is dead, decisions again once it is back."""
    test = "RedisStore kill -9 + restart"
    server = make_redis()
    clock = ManualClock()
    store = RedisStore.from_url(server.url, clock=clock, timeout=TIMEOUT)
    limiter = Limiter(store)
    killed, restarting = threading.Event(), threading.Event()
    started = threading.Event()

    def hit() -> object:
        return limiter.hit("steady", RATE)

    def load() -> tuple[Phase, ...]:
        def until_killed(phase: Phase) -> bool:
            if phase.decided >= 20:
                started.set()
            return not killed.is_set()

        before = run_while(test, "before", hit, until_killed, 5000)  # type: ignore[arg-type]
        down = run_while(test, "down", hit, lambda _: not restarting.is_set(), 5000)  # type: ignore[arg-type]
        recovery = run_while(test, "recovery", hit, lambda p: p.decided == 0, 5000)  # type: ignore[arg-type]
        after = run(test, "after", hit, 30)  # type: ignore[arg-type]
        return before, down, recovery, after

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(load)
        assert started.wait(10)
        kill(server)
        killed.set()
        time.sleep(DOWN_S)  # the load keeps hitting a dead port meanwhile
        restarting.set()
        make_redis(port=server.port)
        phases = future.result(30)
    store.close()
    remaining = limiter.peek("steady", RATE).remaining
    check(*phases, remaining=remaining)


async def test_async_store_rides_out_a_killed_and_restarted_redis(
    make_redis: Callable[..., RedisServer],
) -> None:
    """AsyncRedisStore, 8 hits in flight: the same, without blocking the event loop."""
    test = "AsyncRedisStore kill -9 + restart"
    server = make_redis()
    clock = ManualClock()
    store = AsyncRedisStore.from_url(server.url, clock=clock, timeout=TIMEOUT)
    limiter = AsyncLimiter(store)
    killed, restarting = asyncio.Event(), asyncio.Event()
    healthy = asyncio.Event()

    def hit() -> object:
        return limiter.hit("steady", RATE)

    def until_killed(phase: Phase) -> bool:
        if phase.decided >= 40:
            healthy.set()
        return not killed.is_set()

    async def load() -> tuple[Phase, ...]:
        before = await arun_while(test, "before", hit, until_killed, 5000, 8)  # type: ignore[arg-type]
        down = await arun_while(test, "down", hit, lambda _: not restarting.is_set(), 5000, 8)  # type: ignore[arg-type]
        recovery = await arun_while(test, "recovery", hit, lambda p: p.decided == 0, 5000, 8)  # type: ignore[arg-type]
        after = await arun(test, "after", hit, 80, 8)  # type: ignore[arg-type]
        return before, down, recovery, after

    task = asyncio.create_task(load())
    await asyncio.wait_for(healthy.wait(), 10)
    await asyncio.to_thread(kill, server)
    killed.set()
    await asyncio.sleep(DOWN_S)  # the load keeps hitting a dead port meanwhile
    restarting.set()
    await asyncio.to_thread(make_redis, port=server.port)
    phases = await asyncio.wait_for(task, 30)
    remaining = (await limiter.peek("steady", RATE)).remaining
    await store.aclose()
    check(*phases, remaining=remaining)
