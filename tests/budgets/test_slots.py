"""Concurrency slots for long work: renewed while held, freed one TTL after a holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import aheld_slot, held_slot
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def _free(limiter: Limiter, key: str, limit: int) -> int:
    """Slots free on ``key`` right now (a probe that takes nothing)."""
    return limiter.acquire_slot(key, limit, slots=limit + 1, ttl=1).decision.remaining


@pytest.mark.redis
def test_killed_worker_slots_come_back_after_the_ttl_and_none_leak(
    redis_server: RedisServer,
) -> None:
    """A process holding 3 of 10 slots on Redis is SIGKILLed: its slots return after 1 s."""
    redis_server.client().flushall()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.budgets._worker",
            "hold",
            redis_server.url,
            "gpu",
            "3",
            "1.0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "held"
        held_at = time.monotonic()
        store = RedisStore.from_url(redis_server.url, timeout=1.0)
        limiter = Limiter(store)
        assert _free(limiter, "gpu", 10) == 7
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        assert _free(limiter, "gpu", 10) == 7 or time.monotonic() - held_at >= 1.0
        deadline = time.monotonic() + 5.0
        while _free(limiter, "gpu", 10) != 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        freed_after = time.monotonic() - held_at
        assert _free(limiter, "gpu", 10) == 10
        assert freed_after <= 1.0 + 1.0  # the TTL plus scheduling slack on a busy machine
        assert limiter.acquire_slot("gpu", 10, slots=10, ttl=1)  # all ten, none leaked
        store.close()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)


@pytest.mark.redis
def test_held_slot_renews_past_its_ttl_and_releases_on_exit(redis_server: RedisServer) -> None:
    """A 0.6 s lease renewed every 0.15 s is still held after 1.5 s, and free after the block."""
    redis_server.client().flushall()
    store = RedisStore.from_url(redis_server.url, timeout=1.0)
    limiter = Limiter(store)
    with held_slot(limiter, "stream", 1, ttl=0.6, renew_every=0.15) as held:
        assert held
        time.sleep(1.5)
        assert not held.lost.is_set() and held.renewals >= 3
        assert not limiter.acquire_slot("stream", 1, ttl=1)
    assert _free(limiter, "stream", 1) == 1
    store.close()


@pytest.mark.redis
async def test_aheld_slot_renews_and_releases(redis_server: RedisServer) -> None:
    """The asyncio twin keeps a short lease alive from a task and releases it on exit."""
    import asyncio

    redis_server.client().flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=1.0)
    limiter = AsyncLimiter(store)
    async with aheld_slot(limiter, "stream", 1, ttl=0.6, renew_every=0.15) as held:
        assert held
        await asyncio.sleep(1.2)
        assert held.renewals >= 3
        assert not await limiter.acquire_slot("stream", 1, ttl=1)
    assert (await limiter.acquire_slot("stream", 1, ttl=1)).allowed
    await store.aclose()


def test_a_denied_slot_is_not_renewed_and_bad_options_are_errors() -> None:
    """No renewal for a slot that was not granted; renew_every must be below the ttl."""
    limiter = Limiter(MemoryStore())
    with held_slot(limiter, "k", 1, ttl=5) as first, held_slot(limiter, "k", 1, ttl=5) as second:
        assert first and not second
    assert _free(limiter, "k", 1) == 1
    for options in ({"ttl": 1, "renew_every": 1}, {"ttl": 0}, {"ttl": 1, "renew_every": -1}):
        with pytest.raises(ConfigurationError), held_slot(limiter, "k", 1, **options):
            pass
