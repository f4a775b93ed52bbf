"""redis-server killed (SIGKILL) and restarted on the same port while load keeps running.

While it is down every call fails fast with StorageUnavailableError (never a
Decision); once it is back the store reconnects by itself. The test servers run
without persistence, so the restart loses every counter: that loss is the
expected, documented outcome of a Redis without AOF/RDB, and it is asserted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

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


#: Per twin: the store, its limiter, how many hits are in flight at once, how many must be
#: decided before the kill, and how many the load makes after the restart.
TWINS = {
    "sync": (RedisStore, Limiter, 1, 20, 30),
    "async": (AsyncRedisStore, AsyncLimiter, 8, 40, 80),
}


@pytest.mark.parametrize("twin", ["sync", "async"])
async def test_store_rides_out_a_killed_and_restarted_redis(
    make_redis: Callable[..., RedisServer], twin: str
) -> None:
    """RedisStore (load on its own thread) and AsyncRedisStore (8 hits in flight, without
    blocking the event loop): fast failures while Redis is dead, decisions again once back."""
    store_class, limiter_class, in_flight, healthy, after_calls = TWINS[twin]
    test = f"{store_class.__name__} kill -9 + restart"
    server = make_redis()
    store: Any = store_class.from_url(server.url, clock=ManualClock(), timeout=TIMEOUT)
    limiter: Any = limiter_class(store)
    # Flags the load reads between calls, from its thread or its task alike.
    started, killed, restarting = threading.Event(), threading.Event(), threading.Event()

    def hit() -> Any:
        return limiter.hit("steady", RATE)

    def until_killed(phase: Phase) -> bool:
        if phase.decided >= healthy:
            started.set()
        return not killed.is_set()

    def kill_then_flag() -> None:
        # Flagged on the killing thread, so the load leaves "before" as soon as it can.
        kill(server)
        killed.set()

    async def phase_while(name: str, going: Callable[[Phase], bool]) -> Phase:
        if twin == "sync":
            return await asyncio.to_thread(run_while, test, name, hit, going, 5000)
        return await arun_while(test, name, hit, going, 5000, in_flight)

    async def load() -> tuple[Phase, ...]:
        before = await phase_while("before", until_killed)
        down = await phase_while("down", lambda _: not restarting.is_set())
        recovery = await phase_while("recovery", lambda p: p.decided == 0)
        if twin == "sync":
            after = await asyncio.to_thread(run, test, "after", hit, after_calls)
        else:
            after = await arun(test, "after", hit, after_calls, in_flight)
        return before, down, recovery, after

    task = asyncio.create_task(load())
    assert await asyncio.to_thread(started.wait, 10)
    await asyncio.to_thread(kill_then_flag)
    await asyncio.sleep(DOWN_S)  # the load keeps hitting a dead port meanwhile
    restarting.set()
    await asyncio.to_thread(make_redis, port=server.port)
    phases = await asyncio.wait_for(task, 30)
    if twin == "sync":
        remaining = limiter.peek("steady", RATE).remaining
        store.close()
    else:
        remaining = (await limiter.peek("steady", RATE)).remaining
        await store.aclose()
    check(*phases, remaining=remaining)
