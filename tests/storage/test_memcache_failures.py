"""When memcached is missing, hung, killed, restarted, full of another program's data or too
small for a value; and several servers, one of them down. A failure is a bounded
StorageError, never a silent allow, and never leaves an item half-written.

Elapsed times are asserted against a generous bound (0.5 s for a 50 ms store timeout):
the point is that a call never hangs, not how fast it fails.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_link import BlockingLink
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer
from tests._servers import HOST, STORE_TIMEOUT, SilentServer, free_port
from tests.storage.test_memcache import item_name, raw, raw_get

RATE = Rate.parse("100/minute", burst=20)
TIMEOUT = 0.05
BOUND_S = 0.5


def fails_within_bound(call: Callable[[], object]) -> StorageUnavailableError:
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as caught:
        call()
    assert time.monotonic() - started < BOUND_S
    return caught.value


async def afails_within_bound(call: Callable[[], Awaitable[object]]) -> StorageUnavailableError:
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as caught:
        await call()
    assert time.monotonic() - started < BOUND_S
    return caught.value


# -- nobody there, nobody answering


def test_a_closed_port_is_unavailable_at_once() -> None:
    """Nothing listens: StorageUnavailableError naming the server, fast; ping says False."""
    port = free_port()
    store = MemcacheStore([(HOST, port)], timeout=TIMEOUT)
    error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert f"{HOST}:{port}" in str(error)
    assert store.ping() is False


def test_a_server_that_never_answers_fails_after_the_timeout(silent_server: SilentServer) -> None:
    """A hung server: each call fails after about the timeout (not sooner, not much later),
    each on a new connection (the old one may still get a reply), and ping says False."""
    store = MemcacheStore([(HOST, silent_server.port)], timeout=TIMEOUT)
    for _ in range(2):
        started = time.monotonic()
        error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))
        assert time.monotonic() - started >= TIMEOUT * 0.9
        assert "no reply within 0.05 s" in str(error)
    started = time.monotonic()
    assert store.ping() is False
    assert time.monotonic() - started < BOUND_S


def test_threads_queued_on_a_hung_server_fail_within_the_bound(
    silent_server: SilentServer,
) -> None:
    """16 threads hit one key of a hung server: each fails within the bound, not after the
    timeouts of the calls before it on the item, one after the other."""
    store = MemcacheStore([(HOST, silent_server.port)], timeout=TIMEOUT)
    took: list[float] = []
    errors: list[BaseException] = []

    def run() -> None:
        started = time.monotonic()
        try:
            store.hit("gcra", "k", RATE)
        except StorageUnavailableError as exc:
            errors.append(exc)
        took.append(time.monotonic() - started)

    threads = [threading.Thread(target=run) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(errors) == 16
    assert max(took) < BOUND_S, sorted(took)


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port whose listen queue is full: a connection to it is never made (SYN dropped)."""
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    waiting = []
    for _ in range(2):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((HOST, port))
        waiting.append(sock)
    yield port
    for sock in waiting:
        sock.close()
    listener.close()


def test_a_connection_never_made_fails_within_the_bound(full_backlog: int) -> None:
    store = MemcacheStore([(HOST, full_backlog)], timeout=TIMEOUT)
    error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert "cannot connect: timed out" in str(error)


async def test_async_connection_never_made_fails_within_the_bound(full_backlog: int) -> None:
    """The message says why, though asyncio's timeout has no text of its own."""
    store = AsyncMemcacheStore([(HOST, full_backlog)], timeout=TIMEOUT)
    error = await afails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert str(error).endswith("cannot connect: no answer within 0.05 s")
    await store.aclose()


async def test_async_closed_port_is_unavailable_at_once() -> None:
    store = AsyncMemcacheStore([(HOST, free_port())], timeout=TIMEOUT)
    await afails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert await store.ping() is False
    await store.aclose()


async def test_async_server_that_never_answers_fails_every_call_in_time(
    silent_server: SilentServer,
) -> None:
    """64 calls in flight on 4 keys of a hung server all fail, after the timeout and within the
    bound; none hangs, and the next call fails the same way."""
    store = AsyncMemcacheStore([(HOST, silent_server.port)], timeout=TIMEOUT)
    started = time.monotonic()
    results = await asyncio.gather(
        *(store.hit("gcra", f"k{i % 4}", RATE) for i in range(64)), return_exceptions=True
    )
    assert TIMEOUT * 0.9 <= time.monotonic() - started < BOUND_S
    assert all(isinstance(r, StorageUnavailableError) for r in results), results
    await afails_within_bound(lambda: store.hit("gcra", "k0", RATE))
    assert await store.ping() is False
    await store.aclose()


# -- killed and restarted


def test_a_killed_server_fails_fast_and_is_used_again_once_back(
    make_memcached: Callable[..., MemcachedServer],
) -> None:
    """While the server is down calls fail fast; once it is back on its port they decide (on
    an empty server: a key seen afresh)."""
    server = make_memcached()
    store = MemcacheStore(server.url, clock=ManualClock(), timeout=TIMEOUT)
    assert store.hit("gcra", "k", RATE).remaining == 19
    server.stop()
    for _ in range(2):
        fails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert store.ping() is False
    make_memcached(port=server.port)
    assert store.ping() is True
    assert store.hit("gcra", "k", RATE).remaining == 19


def test_a_restart_between_two_calls_is_no_error(
    make_memcached: Callable[..., MemcachedServer],
) -> None:
    """The server restarted while the store's connection sat idle: the dead connection is
    noticed before use and replaced, and the call decides."""
    server = make_memcached()
    store = MemcacheStore(server.url, clock=ManualClock(), timeout=TIMEOUT)
    assert store.hit("gcra", "k", RATE).remaining == 19
    server.stop()
    make_memcached(port=server.port)
    assert store.hit("gcra", "k", RATE).remaining == 19


def test_after_a_restart_no_value_cached_before_it_is_trusted(
    make_memcached: Callable[..., MemcachedServer],
) -> None:
    """A restarted memcached numbers its writes (CAS) from 1 again, so a CAS number cached
    before the restart may name another value after it. Store A counts 2 and caches the
    item; the server restarts; store B counts 4 (two writes, as A's were); A's next hit must
    see B's 4, not write over them from its cache."""
    server = make_memcached()
    clock = ManualClock()
    first = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    rate = Rate.parse("6/hour")
    first.hit("fixed_window", "k", rate)
    assert first.hit("fixed_window", "k", rate).remaining == 4
    server.stop()
    make_memcached(port=server.port)
    second = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    second.hit("fixed_window", "k", rate)
    assert second.hit("fixed_window", "k", rate, 3).remaining == 2
    assert first.hit("fixed_window", "k", rate).remaining == 1


async def test_async_after_a_restart_no_value_cached_before_it_is_trusted(
    make_memcached: Callable[..., MemcachedServer],
) -> None:
    """The same for the asyncio store: the call on the connection the restart closed fails
    (the loop had not run to notice); the next opens a new one, and sees B's 4."""
    server = make_memcached()
    clock = ManualClock()
    first = AsyncMemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    rate = Rate.parse("6/hour")
    await first.hit("fixed_window", "k", rate)
    assert (await first.hit("fixed_window", "k", rate)).remaining == 4
    server.stop()
    make_memcached(port=server.port)
    second = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    second.hit("fixed_window", "k", rate)
    assert second.hit("fixed_window", "k", rate, 3).remaining == 2
    with pytest.raises(StorageUnavailableError):
        await first.hit("fixed_window", "k", rate)
    assert (await first.hit("fixed_window", "k", rate)).remaining == 1
    await first.aclose()


def test_a_server_killed_under_load_fails_calls_then_serves_again(
    make_memcached: Callable[..., MemcachedServer],
) -> None:
    """4 threads hitting while the server is killed and later started again: every call either
    decides or is StorageUnavailableError within the bound, and calls decide again after."""
    server = make_memcached()
    store = MemcacheStore(server.url, clock=ManualClock(), timeout=TIMEOUT)
    rate = Rate.parse("1000000/hour")
    seen: Counter[str] = Counter()
    slowest = [0.0]
    lock = threading.Lock()
    stop = threading.Event()

    def run(index: int) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                store.hit("gcra", f"k{index}", rate)
                kind = "decided"
            except StorageUnavailableError:
                kind = "unavailable"
            with lock:
                seen[kind] += 1
                slowest[0] = max(slowest[0], time.monotonic() - started)

    def seen_more(kind: str, than: int) -> None:
        deadline = time.monotonic() + 10
        while seen[kind] <= than and time.monotonic() < deadline:
            time.sleep(0.005)  # waiting for the threads' calls, not for a window

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        seen_more("decided", 200)
        server.stop()
        seen_more("unavailable", 50)
        make_memcached(port=server.port)
        seen_more("decided", seen["decided"] + 200)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert seen["decided"] > 400 and seen["unavailable"] > 50
    assert slowest[0] < BOUND_S
    assert store.hit("gcra", "k0", rate).allowed


async def test_async_killed_server_fails_calls_in_flight_then_serves_again(
    make_memcached: Callable[..., MemcachedServer],
) -> None:
    """Calls in flight when the server dies fail within the bound; once it is back on its port
    the store reconnects and decides."""
    server = make_memcached()
    store = AsyncMemcacheStore(server.url, clock=ManualClock(), timeout=TIMEOUT)
    assert (await store.hit("gcra", "k", RATE)).remaining == 19
    server.stop()
    started = time.monotonic()
    results = await asyncio.gather(
        *(store.hit("gcra", f"k{i % 8}", RATE) for i in range(32)), return_exceptions=True
    )
    assert time.monotonic() - started < BOUND_S
    assert all(isinstance(r, StorageUnavailableError) for r in results), results
    assert await store.ping() is False
    make_memcached(port=server.port)
    assert (await store.hit("gcra", "k", RATE)).remaining == 19
    assert await store.ping() is True
    await store.aclose()


# -- another program's value, a value too large


@pytest.mark.parametrize("key", ["k", "ключ", "with space"])
def test_a_foreign_value_is_a_storage_error_and_is_left_as_it_is(
    memcached: MemcachedServer, key: str
) -> None:
    """Another program's value under an item's name: a StorageError (not an outage) naming
    the item, for hits, resets and slots alike; the value is unchanged; other keys work."""
    name = item_name(key)
    for foreign in (b"hello", b'{"rw":2,"e":{}}', b"\xff" * 10):
        assert raw(memcached, b"ms %s %d T0\r\n%s\r\n" % (name, len(foreign), foreign)) == b"HD\r\n"
        store = MemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
        for call in (
            lambda s: s.hit("gcra", key, RATE),
            lambda s: s.hit("gcra", key, RATE, 0),
            lambda s: s.reset("gcra", key, RATE),
            lambda s: s.acquire_slot(key, 1, "l", 1, 1_000_000),
        ):
            with pytest.raises(StorageError, match="did not write") as caught:
                call(store)
            assert not isinstance(caught.value, StorageUnavailableError)
            assert repr(name.decode()) in str(caught.value)
            assert raw_get(memcached, name) == foreign
        assert store.hit("gcra", f"other-{foreign!r}", RATE).remaining == 19


async def test_async_foreign_value_is_a_storage_error(memcached: MemcachedServer) -> None:
    assert raw(memcached, b"ms rw:{k} 5 T0\r\nhello\r\n") == b"HD\r\n"
    store = AsyncMemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    with pytest.raises(StorageError, match=r"'rw:\{k\}'.*did not write"):
        await store.hit("gcra", "k", RATE)
    assert raw_get(memcached, b"rw:{k}") == b"hello"
    assert (await store.hit("gcra", "other", RATE)).remaining == 19
    await store.aclose()


@pytest.fixture
def small_items() -> Iterator[MemcachedServer]:
    """A memcached whose items may hold 2 KB at most."""
    server = MemcachedServer(extra=["-I", "2048", "-o", "slab_chunk_max=1024"])
    yield server
    server.stop()


def grow_until_refused(store: MemcacheStore, server: MemcachedServer) -> tuple[int, bytes]:
    """Hit a 1000/hour sliding log until a hit is refused: the hits admitted, and the item's
    value before the refused one."""
    rate = Rate.parse("1000/hour")
    hits = 0
    while True:
        before = raw_get(server, b"rw:{log}")
        try:
            store.hit("sliding_log", "log", rate)
        except StorageError as exc:
            assert not isinstance(exc, StorageUnavailableError)
            assert before is not None
            return hits, before
        hits += 1
        assert hits < 200


def test_a_value_too_large_is_refused_and_nothing_is_half_written(
    small_items: MemcachedServer,
) -> None:
    """A sliding log would grow past the servers' item size (max_item_bytes, their -I): that
    hit is a StorageError naming the item (not an outage: retrying cannot help), nothing is
    sent, so the item keeps its last value; the next hit on the key fails the same way,
    checks still answer, other keys decide, and a reset makes the key usable again."""
    store = MemcacheStore(
        small_items.url, clock=ManualClock(), timeout=STORE_TIMEOUT, max_item_bytes=2048
    )
    rate = Rate.parse("1000/hour")
    hits, before = grow_until_refused(store, small_items)
    # The last value written is the largest that fits (memcached takes 59 bytes beyond the
    # name and value; the store counts 64): one more log entry, 21 bytes, would not.
    assert 2048 - 64 - 21 < len(before) + len(b"rw:{log}") <= 2048 - 64
    assert raw_get(small_items, b"rw:{log}") == before
    with pytest.raises(StorageError, match=r"'rw:\{log\}'.*max_item_bytes=2048") as refused:
        store.hit("sliding_log", "log", rate)
    # The size is counted as -I counts an item (key, value and overhead), so it is the one
    # number above max_item_bytes, and the parts are named.
    sizes = re.search(
        r"would take (\d+) bytes as memcached's -I counts them \((\d+) of value, 8 of key, "
        r"64 of memcached's per-item overhead",
        str(refused.value),
    )
    assert sizes is not None, str(refused.value)
    total, value = int(sizes[1]), int(sizes[2])
    assert total == value + 8 + 64 > 2048 >= len(before) + 8 + 64
    assert raw_get(small_items, b"rw:{log}") == before
    assert store.hit("sliding_log", "log", rate, 0).remaining == 1000 - hits
    assert store.hit("gcra", "other", RATE).remaining == 19
    store.reset("sliding_log", "log", rate)
    assert store.hit("sliding_log", "log", rate).remaining == 999


def test_a_server_with_smaller_items_than_the_store_knows_refuses_them(
    small_items: MemcachedServer,
) -> None:
    """With max_item_bytes above the servers' -I, memcached refuses the value itself: still a
    StorageError (not an outage), on a connection dropped and replaced. (memcached deletes the
    item it was to replace: set max_item_bytes to the servers' -I.)"""
    store = MemcacheStore(small_items.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    grow_until_refused(store, small_items)
    assert store.hit("gcra", "other", RATE).remaining == 19


# -- several servers


@pytest.fixture
def three(make_memcached: Callable[..., MemcachedServer]) -> list[MemcachedServer]:
    return [make_memcached() for _ in range(3)]


def url_of(servers: list[MemcachedServer]) -> str:
    return "memcache://" + ",".join(f"{HOST}:{server.port}" for server in servers)


def stat(server: MemcachedServer, name: str) -> int:
    reply = raw(server, b"stats\r\n").decode()
    return next(int(line.split()[2]) for line in reply.splitlines() if line.split()[1:2] == [name])


def test_items_spread_over_the_servers_and_node_of_names_the_holder(
    three: list[MemcachedServer],
) -> None:
    """600 keys over 3 servers: each server holds a fair share; node_of names the server that
    holds a key's item, another store (its servers listed in another order) agrees, and a
    key's hits all land there."""
    store = MemcacheStore(url_of(three), clock=ManualClock(), timeout=STORE_TIMEOUT)
    keys = [f"user-{i}" for i in range(597)] + ["ключ", "with space", "x" * 300]
    for key in keys:
        store.hit("gcra", key, RATE)
    held = [stat(server, "curr_items") for server in three]
    assert sum(held) == len(keys)
    assert all(140 < count < 260 for count in held), held
    by_port = {f"{HOST}:{server.port}": server for server in three}
    other = MemcacheStore(url_of(three[::-1]), clock=ManualClock(), timeout=STORE_TIMEOUT)
    for key in keys[:60] + keys[-3:]:
        node = store.node_of(key)
        assert other.node_of(key) == node
        assert [raw_get(server, item_name(key)) is not None for server in three] == [
            server is by_port[node] for server in three
        ]
    # Every hit of a key went to its server: one item each, counted twice now.
    for key in keys[:30]:
        assert store.hit("gcra", key, RATE).remaining == 18
    assert [stat(server, "curr_items") for server in three] == held


def test_with_one_server_down_the_others_still_decide(three: list[MemcachedServer]) -> None:
    """One of three servers stopped: keys on the other two decide; keys on it fail within the
    bound; nothing moves to another server (its keys' counts are not started afresh there)."""
    store = MemcacheStore(url_of(three), clock=ManualClock(), timeout=TIMEOUT)
    keys = [f"user-{i}" for i in range(60)]
    for key in keys:
        assert store.hit("gcra", key, RATE).remaining == 19
    down = three[1]
    down.stop()
    on_down = [key for key in keys if store.node_of(key) == f"{HOST}:{down.port}"]
    assert 5 < len(on_down) < 40
    for key in keys:
        if key in on_down:
            error = fails_within_bound(lambda: store.hit("gcra", key, RATE))  # noqa: B023
            assert f"{HOST}:{down.port}" in str(error)
        else:
            assert store.hit("gcra", key, RATE).remaining == 18
    assert store.ping() is False
    assert sum(stat(server, "curr_items") for server in (three[0], three[2])) == 60 - len(on_down)


async def test_async_with_one_server_down_the_others_still_decide(
    three: list[MemcachedServer],
) -> None:
    store = AsyncMemcacheStore(url_of(three), clock=ManualClock(), timeout=TIMEOUT)
    keys = [f"user-{i}" for i in range(30)]
    assert all(d.allowed for d in await asyncio.gather(*(store.hit("gcra", k, RATE) for k in keys)))
    three[2].stop()
    down = f"{HOST}:{three[2].port}"
    started = time.monotonic()
    results = await asyncio.gather(
        *(store.hit("gcra", key, RATE) for key in keys), return_exceptions=True
    )
    assert time.monotonic() - started < BOUND_S
    for key, result in zip(keys, results, strict=True):
        if store.node_of(key) == down:
            assert isinstance(result, StorageUnavailableError), (key, result)
        else:
            assert not isinstance(result, BaseException) and result.remaining == 18, (key, result)
    assert await store.ping() is False
    await store.aclose()


def test_raw_helpers_read_the_server(memcached: MemcachedServer) -> None:
    """The tests' own reads: an absent item, a stored one."""
    assert raw_get(memcached, b"absent") is None
    assert raw(memcached, b"ms here 2 T0\r\nhi\r\n") == b"HD\r\n"
    assert raw_get(memcached, b"here") == b"hi"


def test_a_command_the_server_does_not_know_says_memcached_16_is_needed(
    memcached: MemcachedServer,
) -> None:
    """memcached answers ERROR to a command it does not know, which is what a memcached older
    than 1.6 answers to every meta command the store sends: the error says which version
    the store needs (a real server, sent a command no version knows)."""
    link = BlockingLink(TIMEOUT)
    with pytest.raises(StorageError, match=r"needs memcached 1\.6 or later") as caught:
        link.call(memcached.address, b"mx nothing\r\n")
    assert not isinstance(caught.value, StorageUnavailableError)
    assert link.call(memcached.address, wire.VERSION).code == b"VERSION"  # a new connection
    link.close()
