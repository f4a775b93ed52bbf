"""Keyed requests against the idempotency middleware: a 409 "still in progress" that says
when to come back (``Retry-After``) is waited for, so a timed-out POST ends with its
original's response; a 409 without one is the answer. And a POST listed in ``methods`` is
retried as it is, without a key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from ratewarden.client import AsyncRetryTransport, RetryPolicy, RetryTransport
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI
from tests.idempotency._apps import Orders, starlette_orders

KEY = {"Idempotency-Key": "order-1"}


async def test_a_keyed_post_waits_for_its_original_and_gets_its_replay() -> None:
    """The original POST is still running when its retry arrives: the middleware answers
    409 with Retry-After: 1, the client waits 1 s (+0.5 of jitter), and gets the original's
    201, replayed. The order ran once."""
    orders = Orders()
    inner = httpx.ASGITransport(
        IdempotencyMiddleware(starlette_orders(orders), AsyncMemoryIdempotencyStore())
    )
    async with httpx.AsyncClient(transport=inner, base_url="http://test") as plain:
        original = asyncio.create_task(
            plain.post("/orders/o?mode=slow", headers=KEY, content=b"1 pear")
        )
        assert await asyncio.to_thread(orders.in_handler.wait, 5)

        class OriginalEndsWhileWaiting(RecordingClock):
            async def asleep(self, seconds: float) -> None:
                await super().asleep(seconds)
                orders.release.set()
                await asyncio.wait({original})

        clock = OriginalEndsWhileWaiting()
        policy = RetryPolicy(max_attempts=5, max_wait=30, idempotency_keys=True)
        transport = AsyncRetryTransport(inner, policy=policy, clock=clock, random=lambda: 0.5)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as retrying:
            retry = await retrying.post("/orders/o?mode=slow", headers=KEY, content=b"1 pear")
        first = await original
    assert first.status_code == 201
    assert (retry.status_code, retry.headers["idempotent-replayed"]) == (201, "true")
    assert retry.json() == first.json()
    assert clock.slept == [1.5]
    assert orders.executed["o"] == 1


def test_a_409_without_retry_after_or_without_a_key_is_the_answer(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """A keyed POST's 409 with no Retry-After is a conflict, returned at once; so is a 409
    with Retry-After on a GET that carries no key. A GET that carries its caller's key and
    is answered 409 with Retry-After is retried, as a keyed POST is."""
    clock = RecordingClock()
    transport = RetryTransport(
        policy=RetryPolicy(idempotency_keys=True), clock=clock, random=lambda: 0.0
    )
    host = throttle_server.url
    conflict, unkeyed, keyed = fresh_name(), fresh_name(), fresh_name()
    with httpx.Client(transport=transport, timeout=5) as http:
        assert http.post(f"{host}/throttle/{conflict}?status=409").status_code == 409
        in_progress = "?status=409&h=Retry-After:2"
        assert http.get(f"{host}/throttle/{unkeyed}{in_progress}").status_code == 409
        assert http.get(f"{host}/throttle/{keyed}{in_progress}", headers=KEY).status_code == 200
    assert [len(throttle_state.attempts[n]) for n in (conflict, unkeyed, keyed)] == [1, 1, 2]
    assert clock.slept == [2.0]


def test_a_post_listed_in_methods_is_retried_without_a_key(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """methods={"GET", "POST"} says POST is safe to repeat on this server: its 503 is
    retried, and no Idempotency-Key is added (idempotency_keys is off)."""
    clock, name = RecordingClock(), fresh_name()
    policy = RetryPolicy(methods={"GET", "POST"})
    transport = RetryTransport(policy=policy, clock=clock, random=lambda: 0.5)
    with httpx.Client(transport=transport, timeout=5) as http:
        response = http.post(f"{throttle_server.url}/throttle/{name}?status=503", content=b"q")
    assert response.status_code == 200
    assert [a.idempotency_key for a in throttle_state.attempts[name]] == [None, None]
    assert clock.slept == [0.25]
