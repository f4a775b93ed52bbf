"""The asyncio memcache store decides the steps queued up on one item together: one write for a
whole turn of them, each in its caller's order, a failing step failing its caller alone, a
cancelled one left out; and a cached item whose entries all expired long ago is added afresh."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from ratewarden import Rate
from ratewarden.storage import Op
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_items import Cache, encode, item_of, on_states, transact
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore
from tests._memcached import MemcachedServer
from tests._servers import STORE_TIMEOUT

HOUR = Rate.parse("50/h")


def stat(server: MemcachedServer, name: str) -> int:
    """One counter of memcached's ``stats``."""
    for line in server.stats().splitlines():
        words = line.split()
        if len(words) == 3 and words[1] == name:
            return int(words[2])
    raise AssertionError(f"no stat {name}")


async def test_a_crowd_on_one_key_is_two_writes_and_exact(memcached: MemcachedServer) -> None:
    """200 hits started at once on one key (50 an hour): the first runs alone, the 199 that
    queued behind it are decided together in one more write; exactly 50 admitted, and they are
    the first 50 started."""
    store = AsyncMemcacheStore(memcached.url, timeout=STORE_TIMEOUT)
    sets = stat(memcached, "cmd_set")
    try:
        decisions = await asyncio.gather(
            *(store.hit("fixed_window", "crowd", HOUR) for _ in range(200))
        )
    finally:
        await store.aclose()
    assert [d.allowed for d in decisions] == [True] * 50 + [False] * 150
    assert [d.remaining for d in decisions[:50]] == list(range(49, -1, -1))
    assert stat(memcached, "cmd_set") - sets == 2


async def test_a_failing_step_fails_its_caller_alone(memcached: MemcachedServer) -> None:
    """An operation whose step raises, queued between hits on the same item: its caller gets
    the error, the hits around it are decided and charged."""

    def boom(args: Any, states: list[Any], now: int) -> tuple[list[int], list[Any]]:
        raise ValueError("a step that cannot decide")

    op = Op("boom", ("rw:{shared}:boom",), (), boom)
    store = AsyncMemcacheStore(memcached.url, timeout=STORE_TIMEOUT)
    try:
        first = asyncio.create_task(store.hit("fixed_window", "shared", HOUR))
        await asyncio.sleep(0)  # the first is in flight; the rest queue behind it
        calls = [
            store.hit("fixed_window", "shared", HOUR),
            store.apply(op),
            store.hit("fixed_window", "shared", HOUR),
        ]
        found = await asyncio.gather(*calls, return_exceptions=True)
        await first
        check = await store.hit("fixed_window", "shared", HOUR, 0)
    finally:
        await store.aclose()
    assert isinstance(found[1], ValueError)
    assert [found[0].remaining, found[2].remaining] == [48, 47]  # type: ignore[attr-defined]
    assert check.remaining == 47


async def test_a_cancelled_waiting_step_is_left_out(memcached: MemcachedServer) -> None:
    """Steps cancelled while they wait for their turn are not decided: nothing is charged."""
    store = AsyncMemcacheStore(memcached.url, timeout=STORE_TIMEOUT)
    try:
        tasks = [asyncio.create_task(store.hit("fixed_window", "cancel", HOUR)) for _ in range(10)]
        await asyncio.sleep(0)  # the first is in flight; nine wait
        for task in tasks[3:6]:
            task.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        check = await store.hit("fixed_window", "cancel", HOUR, 0)
    finally:
        await store.aclose()
    assert sum(isinstance(d, asyncio.CancelledError) for d in done) == 3
    assert check.remaining == 50 - 7


# -- a cached item long expired: added, not compared and set (the flow, driven by hand)


def _drive(flow: Generator[bytes, wire.Reply, Any], replies: list[wire.Reply]) -> list[bytes]:
    """The requests ``flow`` makes when answered with ``replies`` in turn."""
    sent = [next(flow)]
    for reply in replies:
        try:
            sent.append(flow.send(reply))
        except StopIteration:
            break
    else:
        pytest.fail("the flow wanted more replies")
    return sent


def _cached_flow(now: int, real_clock: bool) -> Generator[bytes, wire.Reply, Any]:
    item = item_of(["rw:{k}:fixed_window:1000000"])
    cache = Cache(10)
    cache.put(item.wire, 7, {item.entries[0]: ((1, 2), 2_000_000)})  # expired at 2 s

    def step(states: list[Any], at: int) -> tuple[str, list[tuple[int, Any, int]]]:
        return "decided", [(0, (at // 1_000_000, 1), at + 1_000_000)]

    return transact(
        item,
        [on_states(item.entries, step)],
        lambda: now,
        lambda us: 2,
        cache,
        1 << 20,
        real_clock=real_clock,
    )


@pytest.mark.parametrize(
    ("now", "real_clock", "mode"),
    [
        (10_000_000, True, b" ME c"),  # 8 s after its last entry expired: gone, so added
        (4_000_000, True, b" C7 c"),  # 2 s after: it may still be there
        (10_000_000, False, b" C7 c"),  # an injected clock says nothing of memcached's time
    ],
)
def test_a_long_expired_cached_item_is_added(now: int, real_clock: bool, mode: bytes) -> None:
    sent = _drive(_cached_flow(now, real_clock), [wire.Reply(b"HD", 8, None)])
    assert sent[0].startswith(b"ms rw:{k} ")
    assert sent[0].split(b"\r\n")[0].endswith(mode)


def test_an_add_refused_reads_and_decides_again() -> None:
    """Taken for gone but still there (another process wrote it): the add is refused, the
    item read, and the step decided again on what it holds."""
    value = encode({":fixed_window:1000000": ((10, 3), 11_000_000)})
    sent = _drive(
        _cached_flow(10_000_000, True),
        [
            wire.Reply(b"NS", None, None),
            wire.Reply(b"VA", 9, value),
            wire.Reply(b"HD", 10, None),
        ],
    )
    assert [request.split(b" ")[0] for request in sent] == [b"ms", b"mg", b"ms"]
    assert sent[2].split(b"\r\n")[0].endswith(b" C9 c")


# -- another process writing the same item: read first, rather than write on a stale version


def test_two_writers_take_two_round_trips_a_step_not_three(memcached: MemcachedServer) -> None:
    """Two stores (two processes) taking turns on one key: after the first stale write, each
    step reads first (a read and a write), where trusting the stale cache would cost a refused
    write, a read and a write every time. Alone again, a store's steps are one write each."""
    first, second = (MemcacheStore(memcached.url, timeout=STORE_TIMEOUT) for _ in range(2))
    try:
        first.hit("fixed_window", "turns", HOUR, 0)
        second.hit("fixed_window", "turns", HOUR, 0)
        gets, sets = stat(memcached, "cmd_get"), stat(memcached, "cmd_set")
        for _ in range(20):
            first.hit("fixed_window", "turns", HOUR)
            second.hit("fixed_window", "turns", HOUR)
        steps = 40
        assert stat(memcached, "cmd_set") - sets <= steps + 2  # a stale write at most once each
        assert stat(memcached, "cmd_get") - gets <= steps + 2
        gets, sets = stat(memcached, "cmd_get"), stat(memcached, "cmd_set")
        decisions = [first.hit("fixed_window", "turns", HOUR) for _ in range(5)]
        # The first read finds the other store's last write (so it reads again next step); the
        # second finds its own unchanged: from then on, one write a step and no read.
        assert stat(memcached, "cmd_set") - sets == 5
        assert stat(memcached, "cmd_get") - gets == 2
        assert [d.remaining for d in decisions] == [9, 8, 7, 6, 5]
    finally:
        first.close()
        second.close()


def test_a_delete_of_an_item_taken_for_gone_reads_first() -> None:
    """A step that writes and leaves nothing to keep (as a token budget's operation deleting
    its record does) on an item only taken to be gone is not answered from that guess: the
    item is read (another process may have written it since) and the step decided again on
    what it holds, which here it deletes."""
    item = item_of(["rw:{k}:fixed_window:1000000"])
    cache = Cache(10)
    cache.put(item.wire, 7, {item.entries[0]: ((1, 2), 2_000_000)})

    def reset(states: list[Any], at: int) -> tuple[None, list[tuple[int, Any, int]]]:
        return None, [(0, None, 0)]

    flow = transact(
        item,
        [on_states(item.entries, reset)],
        lambda: 10_000_000,
        lambda us: 2,
        cache,
        1 << 20,
        real_clock=True,
    )
    value = encode({item.entries[0]: ((10, 3), 11_000_000)})
    sent = _drive(flow, [wire.Reply(b"VA", 9, value), wire.Reply(b"HD", None, None)])
    assert sent == [b"mg rw:{k} v c\r\n", b"md rw:{k} C9\r\n"]
