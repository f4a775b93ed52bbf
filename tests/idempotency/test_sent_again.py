"""A store command sent twice is answered as once: what a Redis client's retry does.

redis-py re-sends a command that timed out (its default: a 5 s socket timeout, 10
retries). When Redis was paused rather than gone, the first copy sits in its socket
buffer and runs when Redis resumes, so the retry finds the effect of its own first copy:
the request's lock (``SET NX GET``), or its stored response (the completion script).
Before, the request read its own lock as another request's and answered itself 409
(its handler never ran, the key stayed locked for ``lock_ttl``), and a completion read
its own stored response as a lost lock. These tests send each command twice on a real
redis-server, deterministically, through real Starlette and Flask apps.

And when the pause outlasts the client's retries, the request answers 503 while its
SET can still land later: the middleware gives that lock back after its answer, so a
retry is not told 409 by a request that is gone.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from ratewarden.idempotency import StoredResponse
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncRedisIdempotencyStore, RedisIdempotencyStore
from tests._servers import RedisServer
from tests.idempotency._apps import Orders, flask_orders, starlette_orders
from tests.idempotency.conftest import Awaiting, unique_prefix

RESPONSE = StoredResponse(201, ((b"content-type", b"text/plain"),), b"paid")
SENT_AGAIN = ("SET", "EVALSHA")


def _landed_then_lost() -> redis.TimeoutError:
    return redis.TimeoutError("Timeout reading from socket")


class SentTwice(aredis.Redis):
    """An asyncio client that sends SET and EVALSHA twice and keeps the second reply, as
    redis-py's retry does after a timeout when the first copy reached Redis. With
    ``lose_first_set``, the first SET reaches Redis and its reply is lost for good (the
    client's retries ran out): the caller gets the TimeoutError."""

    lose_first_set = False

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        if name == "SET" and self.lose_first_set:
            self.lose_first_set = False
            await super().execute_command(*args, **options)
            raise _landed_then_lost()
        if name in SENT_AGAIN:
            await super().execute_command(*args, **options)
        return await super().execute_command(*args, **options)


class BlockingSentTwice(redis.Redis):
    """The blocking twin of ``SentTwice``."""

    lose_first_set = False

    def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        if name == "SET" and self.lose_first_set:
            self.lose_first_set = False
            super().execute_command(*args, **options)
            raise _landed_then_lost()
        if name in SENT_AGAIN:
            super().execute_command(*args, **options)
        return super().execute_command(*args, **options)


@pytest.fixture(params=["blocking", "asyncio"])
async def twice_store(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """A Redis store whose every SET and script reaches Redis twice, behind one face."""
    if request.param == "blocking":
        client = BlockingSentTwice(host="127.0.0.1", port=redis_server.port)
        yield Awaiting(RedisIdempotencyStore(client, prefix=unique_prefix()))
        client.close()
    else:
        aclient = SentTwice(host="127.0.0.1", port=redis_server.port)
        yield Awaiting(AsyncRedisIdempotencyStore(aclient, prefix=unique_prefix()))
        await aclient.aclose()


async def test_a_begin_sent_twice_holds_its_own_lock(twice_store: Awaiting) -> None:
    """The second copy of the SET finds the lock of its own token: acquired, and the lock
    is still this request's (another token finds it in flight)."""
    assert (await twice_store.begin("k", "fp", "mine", 60)).state == "acquired"
    assert (await twice_store.begin("k", "fp", "mine", 60)).state == "acquired"
    other = await twice_store.begin("k", "fp", "theirs", 60)
    assert (other.state, other.fingerprint) == ("in_flight", "fp")


async def test_a_complete_sent_twice_is_done_not_lost(twice_store: Awaiting) -> None:
    """The second copy of the completion finds the response its first copy stored: True,
    and the record replays it."""
    await twice_store.begin("k", "fp", "mine", 60)
    assert await twice_store.complete("k", "mine", RESPONSE, 600) is True
    assert await twice_store.complete("k", "mine", RESPONSE, 600) is True
    found = await twice_store.begin("k", "fp", "later", 60)
    assert (found.state, found.response) == ("done", RESPONSE)


async def test_a_complete_of_another_response_is_still_lost(twice_store: Awaiting) -> None:
    """Only this response counts as done: a lock lost to a request that stored another
    answer is still lost (False), and a stranger's token completes nothing."""
    await twice_store.begin("k", "fp", "first", 60)
    await twice_store.complete("k", "first", RESPONSE, 600)
    other = StoredResponse(201, (), b"paid twice")
    assert await twice_store.complete("k", "second", other, 600) is False
    assert (await twice_store.begin("k", "fp", "later", 60)).response == RESPONSE


@pytest.fixture
def orders() -> Orders:
    """Execution counts of this test's app."""
    return Orders()


async def test_starlette_request_whose_set_was_sent_twice_runs(
    redis_server: RedisServer, orders: Orders, caplog: pytest.LogCaptureFixture
) -> None:
    """Starlette on Redis: the request runs (201, once), its response is stored (no "lock
    expired" line), and a retry is replayed."""
    client = SentTwice(host="127.0.0.1", port=redis_server.port)
    store = AsyncRedisIdempotencyStore(client, prefix=unique_prefix())
    app = IdempotencyMiddleware(starlette_orders(orders), store)
    caplog.set_level(logging.WARNING, "ratewarden.idempotency")
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        first = await http.post("/orders/a", content=b"1", headers={"Idempotency-Key": "k1"})
        retry = await http.post("/orders/a", content=b"1", headers={"Idempotency-Key": "k1"})
    await client.aclose()
    assert first.status_code == 201, first.text
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true"
    assert orders.executed["a"] == 1
    assert "lock expired" not in caplog.text


def test_flask_request_whose_set_was_sent_twice_runs(
    redis_server: RedisServer, orders: Orders, caplog: pytest.LogCaptureFixture
) -> None:
    """Flask on Redis: the same."""
    client = BlockingSentTwice(host="127.0.0.1", port=redis_server.port)
    app = flask_orders(orders)
    store = RedisIdempotencyStore(client, prefix=unique_prefix())
    app.wsgi_app = WSGIIdempotencyMiddleware(app.wsgi_app, store)  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, "ratewarden.idempotency")
    http = app.test_client()
    first = http.post("/orders/a", data=b"1", headers={"Idempotency-Key": "k1"})
    retry = http.post("/orders/a", data=b"1", headers={"Idempotency-Key": "k1"})
    client.close()
    assert first.status_code == 201, first.text
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true"
    assert orders.executed["a"] == 1
    assert "lock expired" not in caplog.text


@pytest.fixture
def sync_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client, to look at the keys."""
    client = redis_server.client()
    yield client
    client.close()


@pytest.mark.parametrize("fail_open", [False, True])
async def test_starlette_503_gives_back_a_lock_that_landed(
    redis_server: RedisServer, orders: Orders, sync_client: redis.Redis, fail_open: bool
) -> None:
    """The SET reaches Redis but its reply never comes back: the request answers 503 (or
    runs unguarded, fail_open) and then gives the lock back, so the client's retry a
    second later runs (or, fail_open, runs again) rather than getting 409 for lock_ttl."""
    client = SentTwice(host="127.0.0.1", port=redis_server.port)
    client.lose_first_set = True
    prefix = unique_prefix()
    store = AsyncRedisIdempotencyStore(client, prefix=prefix)
    app = IdempotencyMiddleware(starlette_orders(orders), store, fail_open=fail_open)
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        first = await http.post("/orders/a", content=b"1", headers={"Idempotency-Key": "k"})
        assert sync_client.keys(prefix + "*") == []
        retry = await http.post("/orders/a", content=b"1", headers={"Idempotency-Key": "k"})
    await client.aclose()
    assert first.status_code == (201 if fail_open else 503)
    assert retry.status_code == 201, retry.text
    assert orders.executed["a"] == (2 if fail_open else 1)


@pytest.mark.parametrize("fail_open", [False, True])
def test_flask_503_gives_back_a_lock_that_landed(
    redis_server: RedisServer, orders: Orders, sync_client: redis.Redis, fail_open: bool
) -> None:
    """Flask: the same, the lock given back when the server closes the answer."""
    client = BlockingSentTwice(host="127.0.0.1", port=redis_server.port)
    client.lose_first_set = True
    prefix = unique_prefix()
    app = flask_orders(orders)
    store = RedisIdempotencyStore(client, prefix=prefix)
    app.wsgi_app = WSGIIdempotencyMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, store, fail_open=fail_open
    )
    http = app.test_client()
    first = http.post("/orders/a", data=b"1", headers={"Idempotency-Key": "k"})
    first.close()
    assert sync_client.keys(prefix + "*") == []
    retry = http.post("/orders/a", data=b"1", headers={"Idempotency-Key": "k"})
    client.close()
    assert first.status_code == (201 if fail_open else 503)
    assert retry.status_code == 201, retry.text
    assert orders.executed["a"] == (2 if fail_open else 1)


async def test_every_store_answers_a_call_made_again_as_the_first(any_store: Awaiting) -> None:
    """The protocol, for each store: the same begin (one token) again is acquired, the same
    complete again is True, and the key is then done with that response."""
    assert (await any_store.begin("k", "fp", "mine", 60)).state == "acquired"
    assert (await any_store.begin("k", "fp", "mine", 60)).state == "acquired"
    assert await any_store.complete("k", "mine", RESPONSE, 600) is True
    assert await any_store.complete("k", "mine", RESPONSE, 600) is True
    assert (await any_store.begin("k", "fp", "later", 60)).response == RESPONSE


@pytest.mark.timeout(30)
async def test_a_paused_redis_that_resumes_within_the_retry_runs_the_request(
    make_redis: Any, orders: Orders
) -> None:
    """The real thing, on a redis-server of its own: SIGSTOP, a request whose client times
    out after 1 s and retries once, SIGCONT at 1.5 s. The first SET lands at the resume and
    the retry finds it: 201 and the handler ran (it was 409 from the request's own lock),
    and a retry is replayed. Bounded: the server is resumed in any case."""
    server = make_redis()
    client = aredis.Redis(
        host="127.0.0.1",
        port=server.port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=AsyncRetry(NoBackoff(), 1),
    )
    await client.ping()  # a connection in the pool, as a warm server has
    app = IdempotencyMiddleware(starlette_orders(orders), AsyncRedisIdempotencyStore(client))
    transport = httpx.ASGITransport(app)
    resume = threading.Timer(1.5, os.kill, (server.process.pid, signal.SIGCONT))
    os.kill(server.process.pid, signal.SIGSTOP)
    resume.start()
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            first = await http.post("/orders/p", headers={"Idempotency-Key": "p"})
            resume.join()
            retry = await http.post("/orders/p", headers={"Idempotency-Key": "p"})
    finally:
        resume.cancel()
        os.kill(server.process.pid, signal.SIGCONT)
        await client.aclose()
    assert first.status_code == 201, first.text
    assert retry.headers.get("idempotent-replayed") == "true"
    assert orders.executed["p"] == 1
