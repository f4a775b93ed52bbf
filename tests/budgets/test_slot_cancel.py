"""Slots that an acquire cancelled (or interrupted) while Redis decides give back, and a
failed release on the way out of a block that raised leaves the block's exception.

Redis is held with ``CLIENT PAUSE ... WRITE``: the acquire's script waits in the server
(``blocked_clients`` counts it) while the admin connection still reads and unpauses, so
every step is ordered without sleeping for it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from ratewarden import AsyncLimiter, Limiter
from ratewarden.budgets import (
    AsyncFleetShedder,
    FleetShedder,
    ShedPolicy,
    _twins,
    aheld_slot,
    held_slot,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer, SilentServer
from tests.faults._proxy import Fault, FaultProxy

pytestmark = pytest.mark.redis

#: Two classes, so that a shedder of capacity 2 gives its first class both slots.
TWO = ShedPolicy({"critical": 1.0, "batch": 0.5})


@contextmanager
def paused(admin: redis.Redis) -> Iterator[None]:
    """Scripts wait in the server (at most 10 s) until the block ends."""
    admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    try:
        yield
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")


def wait_blocked(admin: redis.Redis) -> None:
    """Return once the server holds one client's script (polled, at most 5 s)."""
    deadline = time.monotonic() + 5.0
    while admin.info("clients")["blocked_clients"] < 1:
        assert time.monotonic() < deadline, "the acquire never reached the server"
        time.sleep(0.005)


async def await_blocked(admin: redis.Redis) -> None:
    deadline = time.monotonic() + 5.0
    while admin.info("clients")["blocked_clients"] < 1:
        assert time.monotonic() < deadline, "the acquire never reached the server"
        await asyncio.sleep(0.005)


async def cancelled_while_paused(admin: redis.Redis, work: Awaitable[Any]) -> None:
    """Run ``work`` until its script waits in the paused server, cancel it, unpause: the
    task ends with its CancelledError."""
    with paused(admin):
        task = asyncio.ensure_future(work)
        await await_blocked(admin)
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancelled_aheld_slot_acquire_gives_its_slot_back(
    redis_server: RedisServer,
) -> None:
    """aheld_slot cancelled while its acquire waits in Redis: the script runs when Redis
    resumes, and both of the 2 slots are free once the cancelled task has ended (before, one
    stayed held by nobody for the 30 s ttl)."""
    admin = redis_server.client()
    admin.flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    limiter = AsyncLimiter(store)

    async def hold() -> None:
        async with aheld_slot(limiter, "gpu", 2, ttl=30):
            await asyncio.Event().wait()

    await limiter.release_slot(await limiter.acquire_slot("gpu", 2, ttl=1))  # warm
    await cancelled_while_paused(admin, hold())
    assert (await limiter.acquire_slot("gpu", 2, slots=2, ttl=1)).allowed
    await store.aclose()


@pytest.mark.parametrize("how", ["slot", "acquire"])
async def test_a_cancelled_fleet_shedder_acquire_gives_its_slot_back(
    redis_server: RedisServer, how: str
) -> None:
    """AsyncFleetShedder.slot / .acquire cancelled while Redis decides: no slot is left
    counting as load (before, the next request saw utilization 0.2, one ghost for 60 s)."""
    admin = redis_server.client()
    admin.flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    shedder = AsyncFleetShedder(AsyncLimiter(store), "api", capacity=10)

    async def by_slot() -> None:
        async with shedder.slot("batch"):
            await asyncio.Event().wait()

    await shedder.release((await shedder.acquire("critical")).lease)  # warm
    await cancelled_while_paused(admin, by_slot() if how == "slot" else shedder.acquire("batch"))
    found = await shedder.acquire("critical")
    assert found.decision.utilization == 0.1  # this request alone
    await shedder.release(found.lease)
    await store.aclose()


async def test_a_cancelled_acquire_on_a_hung_store_ends_within_the_undo_wait(
    silent_server: SilentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that never answers: the cancelled acquire's give-back is waited for at most
    UNDO_WAIT, then the CancelledError goes on (the give-back is left to run out)."""
    monkeypatch.setattr(_twins, "UNDO_WAIT", 0.2)
    store = AsyncRedisStore.from_url(f"redis://127.0.0.1:{silent_server.port}/0", timeout=30.0)
    task = asyncio.ensure_future(aheld_slot(AsyncLimiter(store), "gpu", 2).__aenter__())
    await asyncio.sleep(0.05)  # let it send
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 0.2 + 1.0
    await store.aclose()


class Interrupted(BaseException):
    """What a signal handler raises: a KeyboardInterrupt, or a timeout's alarm."""


def _raise(signum: int, frame: object) -> None:
    raise Interrupted


@pytest.mark.parametrize("how", ["held_slot", "fleet_shedder", "acquire_slot"])
def test_an_interrupted_blocking_acquire_gives_its_slot_back(
    redis_server: RedisServer, how: str
) -> None:
    """A signal interrupts a blocking acquire after its script took the slot, while the
    reply is still on its way (a proxy holds each chunk 0.3 s), as Ctrl-C or a SIGALRM
    timeout would: the slot is released by its id before the exception goes on (before,
    it stayed held for the 30 s ttl)."""
    redis_server.client().flushall()
    proxy = FaultProxy(redis_server.port)
    store = RedisStore.from_url(proxy.url, timeout=5.0)
    limiter = Limiter(store)
    probe_store = RedisStore.from_url(redis_server.url, timeout=5.0)
    probe = Limiter(probe_store)
    limiter.release_slot(limiter.acquire_slot("gpu", 2, ttl=1))  # connect, load the scripts
    proxy.set_fault(Fault.LATENCY, latency=0.3)

    def interrupt(main: int) -> None:
        deadline = time.monotonic() + 5.0
        # Taken (1 of 2 free) while its reply is held: a probe of 3 slots takes nothing.
        while probe.acquire_slot("gpu", 2, slots=3, ttl=1).decision.remaining != 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        signal.pthread_kill(main, signal.SIGUSR1)

    before = signal.signal(signal.SIGUSR1, _raise)
    helper = threading.Thread(target=interrupt, args=(threading.get_ident(),))
    try:
        helper.start()
        with pytest.raises(Interrupted):
            if how == "held_slot":
                with held_slot(limiter, "gpu", 2, ttl=30):
                    pass
            elif how == "acquire_slot":  # the limiter's own (4096b88)
                limiter.acquire_slot("gpu", 2, ttl=30)
            else:
                FleetShedder(limiter, "gpu", capacity=2, policy=TWO).acquire("critical")
    finally:
        helper.join(timeout=10)
        signal.signal(signal.SIGUSR1, before)
    assert probe.acquire_slot("gpu", 2, slots=2, ttl=1).allowed
    store.close()
    probe_store.close()
    proxy.close()


@pytest.mark.parametrize("how", ["held_slot", "fleet_shedder"])
def test_a_failed_release_does_not_replace_the_blocks_exception(
    redis_server: RedisServer, how: str
) -> None:
    """The block raised ValueError and the release timed out: ValueError goes on, with a
    note saying the release failed (before, the StorageUnavailableError replaced it)."""
    admin = redis_server.client()
    admin.flushall()
    # 1 s: the acquire, before the pause, must not time out on a busy machine; the release,
    # paused 10 s, still does.
    store = RedisStore.from_url(redis_server.url, timeout=1.0)
    limiter = Limiter(store)
    manager: Any
    if how == "held_slot":
        manager = held_slot(limiter, "gpu", 2, ttl=30)
    else:
        manager = FleetShedder(limiter, "gpu", capacity=10).slot("critical")
    with pytest.raises(ValueError, match="the block's own") as raised, manager:
        admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        raise ValueError("the block's own")
    admin.execute_command("CLIENT", "UNPAUSE")
    assert any("releasing the slot also failed" in note for note in raised.value.__notes__)
    store.close()


@pytest.mark.parametrize("how", ["aheld_slot", "fleet_shedder"])
async def test_a_cancelled_block_whose_release_fails_stays_cancelled(
    redis_server: RedisServer, how: str
) -> None:
    """A cancelled block's release that times out: the task ends cancelled, not with the
    release's StorageUnavailableError (which broke wait_for and task groups before)."""
    admin = redis_server.client()
    admin.flushall()
    # 1 s: the acquire must not time out on a busy machine; the paused release still does.
    store = AsyncRedisStore.from_url(redis_server.url, timeout=1.0)
    limiter = AsyncLimiter(store)
    inside = asyncio.Event()

    async def hold() -> None:
        if how == "aheld_slot":
            manager: Any = aheld_slot(limiter, "gpu", 2, ttl=30)
        else:
            manager = AsyncFleetShedder(limiter, "gpu", capacity=10).slot("critical")
        async with manager:
            inside.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(hold())
    await inside.wait()
    with paused(admin):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await store.aclose()
