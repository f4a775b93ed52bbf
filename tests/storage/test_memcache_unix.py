"""The memcache store on memcached's Unix socket (``memcache:///PATH``, and sockets among TCP
servers in one list), against real memcached processes started with ``-s``: decisions as
MemoryStore's, blocking and asyncio; items spread over sockets and ports alike, each socket
known by its path; a restarted server noticed before use; a socket that is not there an
outage the failure modes answer; bad socket URLs refused before anything is opened."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore, parse_url
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer, short_dir
from tests._servers import HOST, STORE_TIMEOUT
from tests.storage.test_memcache import check_script, item_name, outcome, raw_get, script
from tests.storage.test_memcache_async import aoutcome, batches
from tests.storage.test_memcache_failures import (
    TIMEOUT,
    afails_within_bound,
    fails_within_bound,
    stat,
)

Make = Callable[..., MemcachedServer]
RATE = Rate.parse("100/minute", burst=20)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A private directory under /tmp, short enough for a socket's path."""
    with short_dir() as directory:
        yield directory


@pytest.fixture
def on_socket(make_memcached: Make, sock_dir: Path) -> MemcachedServer:
    """A memcached listening on ``sock_dir/mc.sock`` only."""
    return make_memcached(unix_socket=sock_dir / "mc.sock")


# -- decisions through the socket


def test_every_operation_decides_as_memory_does_through_a_socket(
    on_socket: MemcachedServer,
) -> None:
    """test_memcache's seeded scripts (every algorithm, layers, resets, slots; 2,800 steps)
    on two stores sharing the socket server: results equal MemoryStore's call for call, and
    the items are in that server."""
    assert on_socket.url == f"memcache://{on_socket.unix_socket}"
    check_script(on_socket, stores=2, cache_items=10_000)
    assert stat(on_socket, "curr_items") > 0


async def test_async_calls_in_flight_through_a_socket_decide_as_memory_does(
    on_socket: MemcachedServer,
) -> None:
    """The calls between two clock moves started at once on one AsyncMemcacheStore over the
    socket: each result is MemoryStore's for the calls made in turn."""
    memory_clock, memcache_clock = ManualClock(), ManualClock()
    memory = MemoryStore(clock=memory_clock)
    store = AsyncMemcacheStore(on_socket.url, clock=memcache_clock, timeout=STORE_TIMEOUT)
    in_flight = 0
    for index, algorithm in enumerate(sorted(ALGORITHMS)):
        for advance, calls in batches(script(300 + index, algorithm, 150)):
            memory_clock.advance(advance)
            memcache_clock.advance(advance)
            theirs = await asyncio.gather(*(aoutcome(step, store) for step in calls))
            assert theirs == [outcome(memory, step) for step in calls], (algorithm, calls)
            in_flight = max(in_flight, len(calls))
    assert in_flight >= 10
    assert await store.ping() is True
    await store.aclose()
    assert stat(on_socket, "curr_items") > 0


def test_a_socket_url_names_its_path_percent_decoded(make_memcached: Make, sock_dir: Path) -> None:
    """A socket whose path holds a space and a '%': the URL writes them %20 and %25, the store
    connects to the decoded path, names the server by it (node_of, with a second server) and
    shows the URL as given."""
    path = sock_dir / "m c%.sock"
    server = make_memcached(unix_socket=path)
    url = f"memcache://{sock_dir}/m%20c%25.sock"
    assert parse_url(url).addresses == (str(path),)
    store = MemcacheStore.from_url(url, clock=ManualClock(), timeout=0.5)
    assert repr(store) == f"MemcacheStore('{url}', timeout=0.5)"
    assert store.ping() is True
    assert store.node_of("k") == ""  # one server: one circuit
    assert store.hit("gcra", "k", RATE).remaining == 19
    assert raw_get(server, item_name("k")) is not None
    store.close()
    pair = MemcacheStore([str(path), (HOST, 1)], clock=ManualClock(), timeout=0.5)
    assert {pair.node_of(f"k{i}") for i in range(20)} == {str(path), f"{HOST}:1"}


# -- a list of TCP servers and sockets


def test_a_mixed_list_spreads_items_over_ports_and_sockets(
    make_memcached: Make, sock_dir: Path
) -> None:
    """One TCP memcached and two on sockets, in one URL: 450 keys spread fairly over the
    three; node_of names a socket server by its path; a store listing them in another
    order agrees (a server is scored by its name, not its place); each key's hits all land
    on its server."""
    servers = [
        make_memcached(),
        make_memcached(unix_socket=sock_dir / "a.sock"),
        make_memcached(unix_socket=sock_dir / "b.sock"),
    ]
    names = [f"{HOST}:{servers[0].port}", str(sock_dir / "a.sock"), str(sock_dir / "b.sock")]
    url = f"memcache://{names[0]},{names[1]}, {names[2]}"
    store = MemcacheStore(url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.servers.names == tuple(names)
    keys = [f"user-{i}" for i in range(450)]
    for key in keys:
        store.hit("gcra", key, RATE)
    held = [stat(server, "curr_items") for server in servers]
    assert sum(held) == len(keys)
    assert all(100 < count < 200 for count in held), held
    other = MemcacheStore(
        f"memcache://{names[2]},{names[0]},{names[1]}", clock=ManualClock(), timeout=STORE_TIMEOUT
    )
    for key in keys[:60]:
        node = store.node_of(key)
        assert other.node_of(key) == node
        holder = servers[names.index(node)]
        assert [raw_get(server, item_name(key)) is not None for server in servers] == [
            server is holder for server in servers
        ]
    for key in keys[:30]:
        assert other.hit("gcra", key, RATE).remaining == 18
    assert [stat(server, "curr_items") for server in servers] == held
    store.close()
    other.close()


async def test_async_a_mixed_list_decides_on_each_server(
    make_memcached: Make, sock_dir: Path
) -> None:
    """The asyncio store on one TCP and one socket server: 40 keys at once, each counted on
    the server node_of names, both servers used."""
    tcp, unix = make_memcached(), make_memcached(unix_socket=sock_dir / "mc.sock")
    store = AsyncMemcacheStore(f"{tcp.url},{unix.unix_socket}", clock=ManualClock())
    keys = [f"user-{i}" for i in range(40)]
    for expected in (19, 18):
        decisions = await asyncio.gather(*(store.hit("gcra", key, RATE) for key in keys))
        assert [decision.remaining for decision in decisions] == [expected] * len(keys)
    on_socket = [key for key in keys if store.node_of(key) == str(unix.unix_socket)]
    assert 5 < len(on_socket) < 35
    assert stat(unix, "curr_items") == len(on_socket)
    assert stat(tcp, "curr_items") == len(keys) - len(on_socket)
    await store.aclose()


# -- restarts and outages


def test_a_restart_while_idle_is_noticed_and_nothing_cached_is_trusted(
    make_memcached: Make, sock_dir: Path
) -> None:
    """Store A counts 2 on the socket (its connection pooled, the item cached); the server
    restarts on the same path while that connection sits idle; store B counts 4 there. A's
    next hit is no error (the dead pooled connection is noticed before use and replaced)
    and sees B's 4 (a new connection forgets the cached item, whose CAS number the new
    server may have given to another value)."""
    path = sock_dir / "mc.sock"
    server = make_memcached(unix_socket=path)
    clock = ManualClock()
    first = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    rate = Rate.parse("6/hour")
    first.hit("fixed_window", "k", rate)
    assert first.hit("fixed_window", "k", rate).remaining == 4
    server.stop()
    make_memcached(unix_socket=path)
    second = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    second.hit("fixed_window", "k", rate)
    assert second.hit("fixed_window", "k", rate, 3).remaining == 2
    assert first.hit("fixed_window", "k", rate).remaining == 1
    first.close()
    second.close()


def test_a_killed_socket_server_fails_fast_and_is_used_again_once_back(
    make_memcached: Make, sock_dir: Path
) -> None:
    """While the server is down (its socket file left behind) calls fail fast naming the
    path and ping says False; once it listens on the path again, calls decide (on an empty
    server: a key seen afresh)."""
    path = sock_dir / "mc.sock"
    server = make_memcached(unix_socket=path)
    store = MemcacheStore(server.url, clock=ManualClock(), timeout=TIMEOUT)
    assert store.hit("gcra", "k", RATE).remaining == 19
    server.stop()
    for _ in range(2):
        error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))
        assert str(path) in str(error)
    assert store.ping() is False
    make_memcached(unix_socket=path)
    assert store.ping() is True
    assert store.hit("gcra", "k", RATE).remaining == 19
    store.close()


async def test_async_restarted_socket_server_is_reconnected(
    make_memcached: Make, sock_dir: Path
) -> None:
    """The asyncio store: the call on the connection the restart closed fails (the loop had
    not run to notice); the next opens a new connection and sees the other store's count,
    not the item it cached before."""
    path = sock_dir / "mc.sock"
    server = make_memcached(unix_socket=path)
    clock = ManualClock()
    first = AsyncMemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    rate = Rate.parse("6/hour")
    await first.hit("fixed_window", "k", rate)
    assert (await first.hit("fixed_window", "k", rate)).remaining == 4
    server.stop()
    make_memcached(unix_socket=path)
    second = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    second.hit("fixed_window", "k", rate)
    assert second.hit("fixed_window", "k", rate, 3).remaining == 2
    with pytest.raises(StorageUnavailableError):
        await first.hit("fixed_window", "k", rate)
    assert (await first.hit("fixed_window", "k", rate)).remaining == 1
    assert await first.ping() is True
    await first.aclose()


def test_a_socket_that_is_not_there_is_an_outage_the_failure_modes_answer(
    make_memcached: Make, sock_dir: Path
) -> None:
    """No file at the path, or a killed server's file left behind (nobody listens): each
    call is StorageUnavailableError naming the path, within the bound, and ping says False;
    a Limiter's failure mode answers (open admits, closed denies), nothing raised."""
    dead = make_memcached(unix_socket=sock_dir / "dead.sock")
    dead.stop()
    assert (sock_dir / "dead.sock").exists()
    for path, why in ((sock_dir / "absent.sock", "No such file"), (dead.unix_socket, "refused")):
        store = MemcacheStore(f"memcache://{path}", clock=ManualClock(), timeout=TIMEOUT)
        error = fails_within_bound(lambda: store.hit("gcra", "k", RATE))  # noqa: B023
        assert str(error).startswith(f"memcached {path}: cannot connect: ") and why in str(error)
        assert store.ping() is False
        opened = Limiter(store, failure_mode="open").hit("k", RATE)
        assert (opened.allowed, opened.degraded) == (True, "open")
        closed = Limiter(store, failure_mode="closed").hit("k", RATE)
        assert (closed.allowed, closed.degraded) == (False, "closed")


async def test_async_socket_that_is_not_there_is_an_outage(sock_dir: Path) -> None:
    path = sock_dir / "absent.sock"
    store = AsyncMemcacheStore(f"memcache://{path}", clock=ManualClock(), timeout=TIMEOUT)
    error = await afails_within_bound(lambda: store.hit("gcra", "k", RATE))
    assert f"memcached {path}: cannot connect: " in str(error)
    assert await store.ping() is False
    opened = await AsyncLimiter(store, failure_mode="open").hit("k", RATE)
    assert (opened.allowed, opened.degraded) == (True, "open")
    await store.aclose()


# -- the URL


def test_socket_urls_name_their_paths() -> None:
    """A server that begins with '/' is a socket's path, percent-decoded; sockets and
    HOST:PORT servers mix in one list; pairs and paths mix in a list given directly."""
    assert parse_url("memcache:///run/mc.sock").addresses == ("/run/mc.sock",)
    assert parse_url("MEMCACHED:///run/mc.sock/").addresses == ("/run/mc.sock",)
    assert parse_url("memcache://h:1, /a.sock,[::1],/b%2Cc%3F.sock").addresses == (
        ("h", 1),
        "/a.sock",
        ("::1", 11211),
        "/b,c?.sock",
    )
    # The path as written names the server: one socket written two ways is two servers.
    assert parse_url("memcache:///run/mc.sock,/run/./mc.sock").addresses == (
        "/run/mc.sock",
        "/run/./mc.sock",
    )
    longest = "/" + "s" * 106
    assert parse_url(f"memcache://{longest}").addresses == (longest,)
    store = MemcacheStore(["/run/mc.sock", ("h", 1)], clock=ManualClock())
    assert store.servers.names == ("/run/mc.sock", "h:1")
    assert repr(store) == "MemcacheStore('memcache:///run/mc.sock,h:1', timeout=0.02)"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("memcaches:///run/mc.sock", "TLS to a Unix socket is not offered"),
        ("memcaches://h:1,/run/mc.sock?ssl_check_hostname=false", "TLS to a Unix socket"),
        ("memcache+srv:///run/mc.sock", "an SRV record lists TCP servers only"),
        ("memcache+srv://_mc._tcp.x/run", "an SRV record lists TCP servers only"),
        ("memcache:///run/mc.sock,/run/mc.sock", "names a server twice"),
        ("memcache://h:1/run/mc.sock", "a socket is a server of its own, memcache:///PATH"),
        ("memcache:///" + "s" * 107, "is 108 bytes; a Unix socket's path holds 107 at most"),
        ("memcache:///é" + "s" * 105, "is 108 bytes"),
        ("memcache:////", "socket path '/' names no file"),
        ("memcache:///run/mc sock", "has a space; write it %20"),
        ("memcache:///run/%FF.sock", "is not UTF-8 once percent-decoded"),
        ("memcache:///run/%00.sock", "holds a NUL character"),
        ("memcache:///run/mc.sock#x", "no fragment"),
        ("memcache:///run/mc.sock?timeout=1", "unknown option 'timeout'"),
    ],
)
def test_a_bad_socket_url_is_refused_naming_it(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        MemcacheStore(url)
    assert str(caught.value).startswith(f"memcache URL {url!r}")
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("servers", "options", "says"),
    [
        (["run/mc.sock"], {}, "is not a (host, port 1-65535) pair or a Unix socket's"),
        (["/run/mc.sock", "/run/mc.sock"], {}, "names a server twice"),
        (["/run/mc\0.sock"], {}, "holds a NUL character"),
        (["/run/\ud800.sock"], {}, "is not valid text"),
        (["/run/mc.sock", ("h", 1)], {"tls": True}, "tls= with a Unix socket server"),
    ],
)
def test_bad_socket_servers_given_directly_are_refused(
    servers: list[Any], options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        MemcacheStore(servers, **options)
    assert says in str(caught.value)


def test_a_refused_url_opens_nothing(on_socket: MemcachedServer) -> None:
    """TLS asked for the socket (by the URL or by tls=), or the socket listed twice: refused
    when the store is made, and the server saw no connection but the test's own look."""
    path = str(on_socket.unix_socket)
    before = stat(on_socket, "total_connections")
    for servers, options in (
        (f"memcaches://{path}", {}),
        ([path], {"tls": True}),
        (f"memcache://{path},{path}", {}),
    ):
        with pytest.raises(ConfigurationError):
            MemcacheStore(servers, **options)
    assert stat(on_socket, "total_connections") == before + 1
