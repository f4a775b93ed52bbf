"""``AsyncLimiter.slot`` gives its slot back when its block is cancelled by an anyio scope.

anyio's cancel scopes (Starlette's and FastAPI's task groups, ``move_on_after``) cancel
the task again at every loop turn until it leaves the scope, so the release awaited in the
block's ``finally`` was cancelled too. ``AsyncMemcacheStore`` leaves out a call whose caller
was cancelled before it was sent, so on memcached the slot stayed taken for its ttl (20
cancelled blocks left 0 of 5 slots). The release of a cancelled block is now shielded from
the second cancel, on every store, as ``aheld_slot``'s is.

Each block is cancelled by its scope once it is inside (an event it sets), never by time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from ratewarden import AsyncLimiter
from ratewarden.limiter import _undo
from ratewarden.storage.memcache import AsyncMemcacheStore
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import AsyncRedisStore

LIMIT = 2


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis), "memcached"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield AsyncMemoryStore()
        return
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        server.client().flushall()
        found: Any = AsyncRedisStore.from_url(server.url, timeout=5.0)
    else:
        server = request.getfixturevalue("memcached")
        found = AsyncMemcacheStore.from_url(server.url, timeout=5.0)
    yield found
    await found.aclose()


async def cancelled_in_block(limiter: AsyncLimiter) -> None:
    """One ``async with limiter.slot("gpu", LIMIT)`` whose anyio scope is cancelled from
    outside once the block holds its slot; returns when the scope has ended."""
    inside = asyncio.Event()
    scopes: list[anyio.CancelScope] = []

    async def block() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            async with limiter.slot("gpu", LIMIT, ttl=60) as lease:
                assert lease.allowed
                inside.set()
                await asyncio.Event().wait()

    task = asyncio.ensure_future(block())
    waiting = asyncio.ensure_future(inside.wait())
    await asyncio.wait((task, waiting), return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():  # it never got inside: its slot was refused
        await task
    scopes[0].cancel()
    await task
    assert scopes[0].cancelled_caught


async def test_a_slot_block_cancelled_by_an_anyio_scope_gives_its_slot_back(store: Any) -> None:
    """``LIMIT + 3`` blocks cancelled in turn: each got its slot (the ones before gave
    theirs back), and once their releases are done every slot is free (before, on
    memcached: the third block found none, both held by nobody for 60 s)."""
    limiter = AsyncLimiter(store)
    for _ in range(LIMIT + 3):
        await cancelled_in_block(limiter)
        undoing = set(_undo._UNDOING)  # a release the scope's next cancel left running
        if undoing:
            await asyncio.wait(undoing)
    assert (await limiter.acquire_slot("gpu", LIMIT, slots=LIMIT, ttl=1)).allowed
