"""A request cancelled while IdempotencyMiddleware's ``begin`` waits on Redis leaves no lock.

An outer timeout, a task group or a server shutting down cancels the request's task while
the lock's ``SET`` is on its way: Redis still runs it. The middleware caught only a
``StorageError`` there, so the lock stayed, and every retry with that Idempotency-Key was
told 409 "still in progress" for ``lock_ttl`` (60 s) while the app had never run. It now
gives the lock back by its token, run to its end even under anyio's cancel scopes, which
cancel again at every loop turn.

Redis holds the ``SET`` with ``CLIENT PAUSE ... WRITE`` until the request is cancelled, so
every step is ordered without sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import redis.asyncio as aredis

from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncRedisIdempotencyStore
from tests._servers import RedisServer
from tests.budgets.test_slot_cancel import await_blocked, paused
from tests.middleware._helpers import http_scope

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]


class Pay:
    """``POST /pay``: 200, counting its runs."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.runs += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"paid"})


async def post(app: Any, key: str) -> int:
    """One ``POST /pay`` with ``Idempotency-Key: key`` straight into ``app``: its status."""
    scope = http_scope(
        "POST",
        "/pay",
        [(b"idempotency-key", key.encode()), (b"content-length", b"2")],
        client=("127.0.0.1", 5000),
        server=("127.0.0.1", 80),
    )
    sent: list[dict[str, Any]] = []
    bodies = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop()
        await asyncio.Event().wait()  # no disconnect while the app runs
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status: int = sent[0]["status"]
    return status


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aredis.Redis]:
    found = aredis.Redis.from_url(redis_server.url)
    await found.flushall()
    yield found
    await found.aclose()


@pytest.mark.parametrize("how", ["task.cancel", "anyio scope"])
async def test_a_request_cancelled_in_begin_leaves_no_lock(
    redis_server: RedisServer, client: aredis.Redis, how: str
) -> None:
    """Cancelled (once, or by a scope that cancels again every loop turn) while Redis holds
    the lock's SET: the SET runs, and its lock is given back, so the retry runs the app
    (before: 409 "still in progress" for 60 s, the app never run)."""
    admin = redis_server.client()
    pay = Pay()
    app = IdempotencyMiddleware(pay, AsyncRedisIdempotencyStore(client))
    await client.ping()  # a warm connection, as in a running server
    scopes: list[anyio.CancelScope] = []

    async def in_scope() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await post(app, "k-1")

    with paused(admin):
        task = asyncio.ensure_future(post(app, "k-1") if how == "task.cancel" else in_scope())
        await await_blocked(admin)
        if scopes:
            scopes[0].cancel()
        else:
            task.cancel()
    if scopes:
        await task  # the scope takes its own cancellation
        assert scopes[0].cancelled_caught
    else:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await client.keys("ratewarden:idem:*") == []
    assert pay.runs == 0
    assert await post(app, "k-1") == 200
    assert pay.runs == 1
    assert await post(app, "k-1") == 200  # replayed
    assert pay.runs == 1
