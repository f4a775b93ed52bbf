"""The memory store's bounds evict stored responses only: a lock guards a request still
running, and a record that cannot fit without dropping one is refused, changing nothing."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.idempotency import StoredResponse
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore, MemoryIdempotencyStore
from ratewarden.testing import ManualClock
from tests.idempotency._apps import Orders, starlette_orders

SMALL = StoredResponse(201, (), b"." * 100)


def test_a_response_too_large_for_the_bound_evicts_nothing_and_frees_its_key() -> None:
    """Five stored responses and a lock in flight stay when a 5,000-byte response does not
    fit max_bytes=4096: complete raises StorageError saying so, and its key is free."""
    store = MemoryIdempotencyStore(clock=ManualClock(), max_bytes=4096)
    for key in "abcde":
        store.begin(key, "fp", "t", 10)
        store.complete(key, "t", SMALL, 60)
    store.begin("slow", "fp", "s", 10)
    store.begin("big", "fp", "b", 10)
    with pytest.raises(StorageError, match="5256 bytes does not fit"):
        store.complete("big", "b", StoredResponse(201, (), b"x" * 5000), 60)
    assert len(store) == 6
    assert store.begin("slow", "fp", "other", 10).state == "in_flight"
    assert [store.begin(key, "fp", "t2", 10).state for key in "abcde"] == ["done"] * 5
    assert store.begin("big", "fp", "b2", 10).state == "acquired"


def test_locks_are_never_evicted_past_max_entries() -> None:
    """With max_entries=3 held by three requests in flight, a fourth begin raises
    StorageError and the three keep their locks; stored responses go first meanwhile."""
    store = MemoryIdempotencyStore(clock=ManualClock(), max_entries=3)
    store.begin("done", "fp", "t", 10)
    store.complete("done", "t", SMALL, 60)
    for key in "ab":
        store.begin(key, "fp", "t", 10)
    assert store.begin("c", "fp", "t", 10).state == "acquired"  # evicts "done", not a lock
    with pytest.raises(StorageError, match="full of requests in flight"):
        store.begin("d", "fp", "t", 10)
    assert [store.begin(key, "fp", "other", 10).state for key in "abc"] == ["in_flight"] * 3
    store.release("a", "t")
    assert store.begin("done", "fp", "t2", 10).state == "acquired"  # it was the one evicted


def test_locks_left_past_their_ttl_make_room() -> None:
    """A store full of locks whose lock_ttl has passed takes a new one: they are expired."""
    clock = ManualClock()
    store = MemoryIdempotencyStore(clock=clock, max_entries=2)
    store.begin("a", "fp", "t", 10)
    store.begin("b", "fp", "t", 10)
    clock.advance(10)
    assert store.begin("c", "fp", "t", 10).state == "acquired"
    assert len(store) == 1


def test_max_bytes_below_one_record_is_refused() -> None:
    """max_bytes=100 could not hold one lock (256 bytes): refused, naming it."""
    for cls in (MemoryIdempotencyStore, AsyncMemoryIdempotencyStore):
        with pytest.raises(ConfigurationError, match=r"max_bytes=100: must be >= 256"):
            cls(max_bytes=100)
    assert MemoryIdempotencyStore(max_bytes=256).max_bytes == 256


async def test_a_big_response_leaves_a_request_in_flight_guarded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The walk's case: max_bytes=4096 and max_response_bytes=10,000. A 5,000-byte answer
    is sent but not stored, with a warning that says why; the slow request in flight keeps
    its lock (its duplicate gets 409), and a stored response is still replayed."""
    orders = Orders()
    store = AsyncMemoryIdempotencyStore(max_bytes=4096)
    app = IdempotencyMiddleware(starlette_orders(orders), store, max_response_bytes=10_000)
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        small = await client.post("/orders/small", headers={"Idempotency-Key": "s"})
        slow = asyncio.create_task(
            client.post("/orders/slow?mode=slow", headers={"Idempotency-Key": "w"})
        )
        try:
            assert await asyncio.to_thread(orders.in_handler.wait, 5)
            with caplog.at_level(logging.WARNING, "ratewarden.idempotency"):
                big = await client.post("/orders/big?mode=big", headers={"Idempotency-Key": "b"})
            duplicate = await client.post(
                "/orders/slow?mode=slow", headers={"Idempotency-Key": "w"}
            )
        finally:
            orders.release.set()
        first = await slow
        again = await client.post("/orders/small", headers={"Idempotency-Key": "s"})
    assert (small.status_code, big.status_code, len(big.content)) == (201, 200, 5000)
    assert (duplicate.status_code, first.status_code) == (409, 201)
    assert again.headers["idempotent-replayed"] == "true"
    assert orders.executed == {"small": 1, "slow": 1, "big": 1}
    assert "does not fit" in caplog.text
    assert "lock expired" not in caplog.text
