"""The memcache store's servers from a DNS SRV record (``memcache+srv://``), as
envoyproxy/ratelimit's ``MEMCACHE_SRV``: looked up in a real DNS server (dnsmasq on a loopback
port, named by the URL's ``nameserver``) when the store is made, and again every ``refresh``
seconds, the list kept when a lookup fails; the items spread over what the record lists, and a
changed list moves only the items of the servers that came or went."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.storage._memcache_link import Servers
from ratewarden.storage._memcache_srv import Found, SrvLookupError
from ratewarden.storage._memcache_url import Address
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore, parse_url
from ratewarden.testing import ManualClock
from tests._dns import DNSMASQ, DnsServer
from tests._memcached import MemcachedServer
from tests._servers import STORE_TIMEOUT
from tests.storage.test_memcache import item_name, raw_get

NAME = "_memcache._tcp.rw.test"
RATE = Rate.parse("3/minute")
Make = Callable[..., MemcachedServer]

needs_dnsmasq = pytest.mark.skipif(DNSMASQ is None, reason="no dnsmasq (scripts/test installs it)")


@pytest.fixture
def two(make_memcached: Make) -> list[MemcachedServer]:
    return [make_memcached(), make_memcached()]


@pytest.fixture
def dns(two: list[MemcachedServer]) -> Iterator[DnsServer]:
    """dnsmasq listing the two servers under NAME, as targets named localhost."""
    if DNSMASQ is None:
        pytest.skip("no dnsmasq (scripts/test installs it)")
    server = DnsServer([(NAME, "localhost", mc.port) for mc in two])
    yield server
    server.stop()


def url(dns: DnsServer, name: str = NAME, **options: str) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"memcache+srv://{name}?nameserver={dns.nameserver}" + (f"&{query}" if query else "")


def holder(servers: list[MemcachedServer], key: str) -> MemcachedServer:
    [found] = [mc for mc in servers if raw_get(mc, item_name(key)) is not None]
    return found


def test_the_servers_are_the_records_and_the_items_spread_over_them(
    dns: DnsServer, two: list[MemcachedServer]
) -> None:
    """Both targets, sorted, with their ports; 3 a minute on a key is exact; 40 keys land on
    both servers, each key's item on the server node_of names."""
    store = MemcacheStore(url(dns), clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.servers.names == tuple(sorted(f"localhost:{mc.port}" for mc in two))
    assert repr(store).startswith(f"MemcacheStore('memcache+srv://{NAME}'")
    assert [store.hit("gcra", "k", RATE).allowed for _ in range(4)] == [True] * 3 + [False]
    keys = [f"key-{i}" for i in range(40)]
    for key in keys:
        store.hit("gcra", key, RATE)
    holders = {key: holder(two, key) for key in keys}
    assert {mc.port for mc in holders.values()} == {mc.port for mc in two}
    for key in keys:
        assert store.node_of(key) == f"localhost:{holders[key].port}"
    assert store.ping() is True


async def test_async_store_on_the_records(dns: DnsServer, two: list[MemcachedServer]) -> None:
    store = AsyncMemcacheStore(url(dns), clock=ManualClock(), timeout=STORE_TIMEOUT)
    allowed = [(await store.hit("gcra", "k", RATE)).allowed for _ in range(4)]
    assert allowed == [True] * 3 + [False]
    assert await store.ping() is True
    await store.aclose()


#: The stores' refresh, on their ManualClock: the tests advance it by this much.
REFRESH = "1"


def refreshed(store: MemcacheStore, clock: ManualClock, names: tuple[str, ...]) -> None:
    """Advance the store's clock past its refresh and call it until its servers are ``names``:
    the first call finds a lookup due and starts it in a thread of its own, whose end the
    loop waits for (bounded at 5 s; no window is waited for)."""
    clock.advance(float(REFRESH))
    deadline = time.monotonic() + 5
    while store.servers.names != names:
        assert time.monotonic() < deadline, store.servers.names
        store.ping()
        time.sleep(0.01)


def test_a_refresh_follows_the_record_and_moves_only_the_changed_servers_items(
    dns: DnsServer, two: list[MemcachedServer], make_memcached: Make
) -> None:
    """The record changes from {A, B} to {B, C} and the refresh comes due: the store follows. A key
    held by B before and after keeps its count (exact across the change); a key now on
    another server than before starts afresh there (memcached servers share nothing, as with
    upstream's client). No value cached for one server is used on another: each server's CAS
    numbers are its own."""
    a, b = two
    c = make_memcached()
    clock = ManualClock()
    store = MemcacheStore(url(dns, refresh=REFRESH), clock=clock, timeout=STORE_TIMEOUT)
    keys = [f"key-{i}" for i in range(60)]
    for key in keys:
        store.hit("gcra", key, RATE)
    on_a = [key for key in keys if holder(two, key) is a]
    on_b = [key for key in keys if holder(two, key) is b]
    dns.serve([(NAME, "localhost", mc.port) for mc in (b, c)])
    refreshed(store, clock, tuple(sorted(f"localhost:{mc.port}" for mc in (b, c))))
    now_on = {key: store.node_of(key) for key in keys}
    stayed = [key for key in on_b if now_on[key] == f"localhost:{b.port}"]
    # Rendezvous hashing: A's items go to B or C, B's stay or go to C; about half of each.
    assert stayed
    for key in keys:
        remaining = store.hit("gcra", key, RATE).remaining
        assert remaining == (1 if key in stayed else 2), key
        assert raw_get(b if now_on[key] == f"localhost:{b.port}" else c, item_name(key))
    assert any(now_on[key] == f"localhost:{c.port}" for key in on_a)


def test_a_failed_refresh_keeps_the_list(
    dns: DnsServer, two: list[MemcachedServer], caplog: pytest.LogCaptureFixture
) -> None:
    """The record is gone from DNS: the lookup fails (logged as a warning), the servers in
    use stay and decide."""
    clock = ManualClock()
    store = MemcacheStore(url(dns, refresh=REFRESH), clock=clock, timeout=STORE_TIMEOUT)
    names = store.servers.names
    found = store._found
    assert found is not None
    dns.serve([("_other._tcp.rw.test", "localhost", 1)])
    lookups = found.lookups
    store.ping()
    assert found.lookups == lookups  # not due yet
    clock.advance(float(REFRESH))
    with caplog.at_level(logging.WARNING, logger="ratewarden.storage.memcache"):
        deadline = time.monotonic() + 10
        while found.lookups == lookups:
            assert time.monotonic() < deadline
            store.ping()
            time.sleep(0.01)
    assert store.servers.names == names
    assert any(f"the SRV lookup of {NAME} failed" in r.getMessage() for r in caplog.records)
    assert [store.hit("gcra", "k", RATE).allowed for _ in range(4)] == [True] * 3 + [False]


@needs_dnsmasq
def test_a_name_without_servers_stops_the_store_at_its_start(make_memcached: Make) -> None:
    """No such record, a record saying the service is not here (target "."), or no DNS
    server at all: ConfigurationError naming the record, before any call."""
    dns = DnsServer([("_memcache._tcp.gone.test", "", 0)])
    try:
        with pytest.raises(ConfigurationError, match=f"SRV lookup of {NAME} failed"):
            MemcacheStore(url(dns))
        with pytest.raises(
            ConfigurationError, match=r"_memcache\._tcp\.gone\.test lists no server"
        ):
            MemcacheStore(url(dns, "_memcache._tcp.gone.test"))
    finally:
        dns.stop()
    where = parse_url(url(dns))  # nobody answers there now (a short lookup timeout)
    with pytest.raises(ConfigurationError, match=f"memcache\\+srv://{NAME}: the SRV lookup"):
        Found(where, timeout=0.3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("memcache+srv://memcache.example", "is not an SRV name: _SERVICE._PROTO.NAME"),
        ("memcache+srv://_memcache._tcp.", "is not an SRV name"),
        ("memcache+srv://_m._tcp.a,_m._tcp.b", "is not an SRV name"),
        ("memcache+srv://_m._tcp.a:11211", "is not an SRV name"),
        ("memcache+srv://_m._tcp.a?refresh=-1", "refresh='-1' must be seconds >= 0"),
        ("memcache+srv://_m._tcp.a?refresh=soon", "refresh='soon'"),
        ("memcache+srv://_m._tcp.a?refresh=inf", "refresh='inf'"),
        ("memcache+srv://_m._tcp.a?nameserver=dns.example", "must be an IP address"),
        ("memcache+srv://_m._tcp.a?nameserver=10.0.0.2:99999", "port '99999'"),
        ("memcache+srv://_m._tcp.a?ssl_ca_certs=/ca.pem", "TLS options need memcaches://"),
        ("memcache://h:1?nameserver=10.0.0.2", "SRV options need memcache+srv://"),
        ("memcache+srv://_m._tcp.a?timeout=1", "unknown option 'timeout'"),
    ],
)
def test_bad_srv_urls_are_refused_naming_what(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        MemcacheStore(text)
    assert message in str(caught.value)


def test_the_srv_url_says_what_it_means() -> None:
    where = parse_url(
        "MEMCACHES+SRV://_memcache._tcp.cache.example.?refresh=2.5"
        "&nameserver=10.0.0.2,[fd00::53]:5353"
    )
    assert where.srv == "_memcache._tcp.cache.example"
    assert where.refresh == 2.5
    assert where.nameservers == (("10.0.0.2", 53), ("fd00::53", 5353))
    assert where.tls is not None and where.addresses == ()
    assert parse_url("memcache+srv://_m._tcp.a").refresh == 0.0


# -- when the lookups run (the pure logic, with a lookup and a clock of the test's own)


class Lookups:
    """A lookup that answers from ``answers`` in turn (an exception is raised), counted."""

    def __init__(self, *answers: tuple[Address, ...] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(
        self, name: str, nameservers: tuple[Address, ...], timeout: float
    ) -> tuple[Address, ...]:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_lookups_run_once_at_the_start_and_then_every_refresh() -> None:
    now = [100.0]
    first, second = (("a", 1), ("b", 2)), (("b", 2), ("c", 3))
    look = Lookups(first, second)
    found = Found(
        parse_url("memcache+srv://_m._tcp.x?refresh=10"), look=look, monotonic=lambda: now[0]
    )
    assert look.calls == 1 and found.servers.addresses == first
    now[0] = 109.9
    assert found.current().addresses == first and look.calls == 1
    found._start()  # not due: nothing runs
    assert look.calls == 1
    now[0] = 110.0
    servers = found.current()  # due: a lookup starts in a thread; the list in use is returned
    assert servers.addresses in (first, second)
    deadline = time.monotonic() + 5
    while found.lookups < 2:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert look.calls == 2 and found.current().addresses == second
    assert found.current() is found.current()  # one Servers until the list changes
    now[0] = 115.0
    found.current()
    assert look.calls == 2  # the next is due at 120


def test_once_only_without_refresh_and_a_failure_keeps_the_list() -> None:
    now = [0.0]
    look = Lookups((("a", 1),), SrvLookupError("the SRV lookup of _m._tcp.x failed: timeout"))
    found = Found(parse_url("memcache+srv://_m._tcp.x"), look=look, monotonic=lambda: now[0])
    now[0] = 1e9
    assert found.current().addresses == (("a", 1),) and look.calls == 1
    found.refresh()  # by hand: fails, keeps the list
    assert found.current().addresses == (("a", 1),) and look.calls == 2


def test_a_failed_first_lookup_is_a_configuration_error() -> None:
    look = Lookups(SrvLookupError("the SRV record _m._tcp.x lists no server"))
    with pytest.raises(ConfigurationError, match=r"memcache\+srv://_m\._tcp\.x: the SRV record"):
        Found(parse_url("memcache+srv://_m._tcp.x"), look=look)


def test_without_dnspython_the_message_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "dns.resolver", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'ratewarden\[memcache-srv\]'"):
        MemcacheStore("memcache+srv://_m._tcp.x?nameserver=127.0.0.1")


async def test_async_store_follows_a_refresh(
    dns: DnsServer, two: list[MemcachedServer], make_memcached: Make
) -> None:
    """The asyncio store swaps its servers too, and its connection to a server no longer
    listed is closed."""
    a, b = two
    c = make_memcached()
    clock = ManualClock()
    store = AsyncMemcacheStore(url(dns, refresh=REFRESH), clock=clock, timeout=STORE_TIMEOUT)
    assert await store.ping() is True
    dns.serve([(NAME, "localhost", mc.port) for mc in (b, c)])
    clock.advance(float(REFRESH))
    expected = tuple(sorted(f"localhost:{mc.port}" for mc in (b, c)))
    deadline = time.monotonic() + 5
    while store.servers.names != expected:
        assert time.monotonic() < deadline
        await store.ping()
        await asyncio.sleep(0.01)
    assert await store.ping() is True

    def connected(server: MemcachedServer) -> int:
        stats = server.stats().splitlines()
        [line] = [line for line in stats if line.startswith("STAT curr_connections ")]
        return int(line.split()[2])

    deadline = time.monotonic() + 5
    while connected(a) > connected(c) - 1:  # A: only the stats look's own connection left
        assert time.monotonic() < deadline, (connected(a), connected(c))
        await asyncio.sleep(0.01)
    await store.aclose()


def test_a_value_cached_from_one_server_is_never_written_to_another(
    dns: DnsServer, two: list[MemcachedServer]
) -> None:
    """A CAS number means something only to the server that gave it, and fresh servers
    number their writes alike (1, 2, ...). Key K is on A, then on B once the record lists B
    alone; S, already connected to both, counted 2 on A (CAS 2 cached); T counted 3 on B in
    two writes (CAS 2 there too). S's next hit must read B's 3 and deny, not write over it
    from what it cached for A."""
    a, b = two
    old = Servers([("localhost", mc.port) for mc in sorted(two, key=lambda mc: mc.port)])
    key = next(
        f"k{i}" for i in range(1000) if old.addresses[old.of(item_name(f"k{i}"))][1] == a.port
    )
    clock = ManualClock()
    rate = Rate.parse("3/minute")
    s = MemcacheStore(url(dns, refresh=REFRESH), clock=clock, timeout=STORE_TIMEOUT)
    assert s.ping() is True  # connected to both: no new connection will clear its cache
    assert [s.hit("fixed_window", key, rate).remaining for _ in range(2)] == [2, 1]
    t = MemcacheStore([("localhost", b.port)], clock=clock, timeout=STORE_TIMEOUT)
    assert t.hit("fixed_window", key, rate).remaining == 2
    assert t.hit("fixed_window", key, rate, 2).remaining == 0
    dns.serve([(NAME, "localhost", b.port)])
    refreshed(s, clock, (f"localhost:{b.port}",))
    assert s.hit("fixed_window", key, rate).allowed is False
