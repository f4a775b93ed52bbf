"""The memcache store over TLS (``memcaches://``, ``tls=``), against a real memcached built
with TLS (Debian's is: ``-Z``): decisions as over plain TCP, the server's certificate checked
(its chain, and its name unless ``ssl_check_hostname=false``), a client certificate for a
server that asks for one, pooled connections kept and a restarted server's noticed, and bad
options refused before anything is sent."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore, parse_url
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer, TlsFiles, tls_files
from tests._servers import HOST, STORE_TIMEOUT
from tests.storage.test_memcache import item_name, raw_get

RATE = Rate.parse("3/minute")
Make = Callable[..., MemcachedServer]


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    return tls_files(tmp_path)


def q(path: Path) -> str:
    return quote(str(path), safe="")


def connections(server: MemcachedServer) -> int:
    stats = dict(
        line.split()[1:3] for line in server.stats().splitlines() if line.startswith("STAT")
    )
    return int(stats["total_connections"])


def test_decisions_over_tls_are_the_same_and_land_in_the_server(
    make_memcached: Make, pki: TlsFiles
) -> None:
    """3 a minute over TLS: three allowed, the fourth denied, the item in the server; a
    plain-TCP store on the same data (its plain port) agrees."""
    server = make_memcached(tls=pki)
    clock = ManualClock()
    store = MemcacheStore(server.url, clock=clock, timeout=STORE_TIMEOUT)
    assert repr(store).startswith(f"MemcacheStore('memcaches://{HOST}:{server.port}'")
    assert [store.hit("gcra", "k", RATE).allowed for _ in range(4)] == [True] * 3 + [False]
    assert raw_get(server, item_name("k")) is not None
    plain = MemcacheStore([(HOST, server.plain_port)], clock=clock, timeout=STORE_TIMEOUT)
    assert plain.hit("gcra", "k", RATE).allowed is False
    assert store.ping() is True


async def test_async_decisions_over_tls(make_memcached: Make, pki: TlsFiles) -> None:
    server = make_memcached(tls=pki)
    store = AsyncMemcacheStore(server.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    allowed = [(await store.hit("gcra", "k", RATE)).allowed for _ in range(4)]
    assert allowed == [True] * 3 + [False]
    assert await store.ping() is True
    await store.aclose()


def test_one_tls_connection_serves_many_calls(make_memcached: Make, pki: TlsFiles) -> None:
    """A pooled TLS socket is taken again (an idle check that always failed on TLS would
    make a handshake a call): 50 calls, one connection."""
    server = make_memcached(tls=pki)
    store = MemcacheStore(server.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    store.hit("gcra", "k", RATE)
    before = connections(server)
    for _ in range(50):
        store.hit("gcra", "k", RATE)
    assert connections(server) - before == 1  # the stats look's own connection


def test_a_restarted_tls_server_is_noticed_before_use(make_memcached: Make, pki: TlsFiles) -> None:
    """The server restarted while the TLS connection sat idle: it is replaced before the call
    (no error), and nothing cached before the restart is trusted."""
    server = make_memcached(tls=pki)
    store = MemcacheStore(server.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.hit("gcra", "k", RATE).remaining == 2
    server.stop()
    make_memcached(port=server.port, tls=pki)
    assert store.hit("gcra", "k", RATE).remaining == 2


def test_a_server_certificate_from_another_ca_is_refused(
    make_memcached: Make, pki: TlsFiles, tmp_path: Path
) -> None:
    """The system's CAs (no ssl_ca_certs) and another CA both refuse the test CA's server:
    an outage naming the failed check, never a decision."""
    server = make_memcached(tls=pki)
    (tmp_path / "other").mkdir()
    other = tls_files(tmp_path / "other")
    for url in (
        f"memcaches://{HOST}:{server.port}",
        f"memcaches://{HOST}:{server.port}?ssl_ca_certs={q(other.ca)}",
    ):
        store = MemcacheStore(url, clock=ManualClock(), timeout=STORE_TIMEOUT)
        with pytest.raises(StorageUnavailableError, match="certificate verify failed"):
            store.hit("gcra", "k", RATE)
        assert store.ping() is False
    assert raw_get(server, item_name("k")) is None


async def test_async_a_server_certificate_from_another_ca_is_refused(
    make_memcached: Make, pki: TlsFiles
) -> None:
    server = make_memcached(tls=pki)
    store = AsyncMemcacheStore(f"memcaches://{HOST}:{server.port}", timeout=STORE_TIMEOUT)
    with pytest.raises(StorageUnavailableError, match="certificate verify failed"):
        await store.hit("gcra", "k", RATE)
    await store.aclose()


def test_the_name_is_checked_unless_told_not_to(make_memcached: Make, tmp_path: Path) -> None:
    """A certificate for cache.example reached at 127.0.0.1: refused for its name; with
    ssl_check_hostname=false its chain alone is checked, and the call decides."""
    pki = tls_files(tmp_path, names=("cache.example",))
    server = make_memcached(tls=pki)
    url = f"memcaches://{HOST}:{server.port}?ssl_ca_certs={q(pki.ca)}"
    with pytest.raises(StorageUnavailableError, match=r"match|mismatch"):
        MemcacheStore(url, timeout=STORE_TIMEOUT).hit("gcra", "k", RATE)
    lenient = MemcacheStore(url + "&ssl_check_hostname=false", timeout=STORE_TIMEOUT)
    assert lenient.hit("gcra", "k", RATE).allowed


def test_a_server_that_asks_for_a_client_certificate_gets_one(
    make_memcached: Make, pki: TlsFiles
) -> None:
    """memcached with ssl_verify_mode=2: a store without a client certificate is turned
    away; one with ssl_certfile and ssl_keyfile decides."""
    server = make_memcached(tls=pki, client_certs=True)
    without = MemcacheStore(server.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    with pytest.raises(StorageUnavailableError):
        without.hit("gcra", "k", RATE)
    url = f"{server.url}&ssl_certfile={q(pki.client_cert)}&ssl_keyfile={q(pki.client_key)}"
    store = MemcacheStore(url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert [store.hit("gcra", "k", RATE).allowed for _ in range(4)] == [True] * 3 + [False]


def test_tls_given_as_a_context_or_true(make_memcached: Make, pki: TlsFiles) -> None:
    """tls= an ssl.SSLContext (trusting the test CA) decides; tls=True is the system's CAs,
    which do not know the test CA."""
    server = make_memcached(tls=pki)
    context = ssl.create_default_context(cafile=str(pki.ca))
    store = MemcacheStore([(HOST, server.port)], tls=context, timeout=STORE_TIMEOUT)
    assert store.hit("gcra", "k", RATE).allowed
    assert store.tls is context
    system = MemcacheStore([(HOST, server.port)], tls=True, timeout=STORE_TIMEOUT)
    with pytest.raises(StorageUnavailableError, match="certificate verify failed"):
        system.hit("gcra", "k", RATE)


def test_a_plain_store_on_a_tls_port_fails_within_its_timeout(
    make_memcached: Make, pki: TlsFiles
) -> None:
    """memcache:// to a TLS-only port: the server waits for a handshake that never comes;
    the call is an outage within the timeout, not a hang."""
    server = make_memcached(tls=pki)
    store = MemcacheStore([(HOST, server.port)], timeout=0.05)
    with pytest.raises(StorageUnavailableError):
        store.hit("gcra", "k", RATE)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memcaches://h:1?ssl_ca_certs=/nowhere/ca.pem", "ssl_ca_certs='/nowhere/ca.pem' cannot"),
        ("memcaches://h:1?ssl_certfile=/nowhere/c.pem", "ssl_certfile='/nowhere/c.pem'"),
        ("memcaches://h:1?ssl_keyfile=/k.pem", "ssl_keyfile without ssl_certfile"),
        ("memcaches://h:1?ssl_check_hostname=no", "ssl_check_hostname='no' must be true or"),
        ("memcaches://h:1?ssl_ca_certs=", "ssl_ca_certs is empty"),
        ("memcaches://h:1?ssl_verify=1", "unknown option 'ssl_verify'"),
        ("memcache://h:1?ssl_ca_certs=/ca.pem", "TLS options need memcaches://"),
        ("memcaches://h:1?ssl_ca_certs=/a&ssl_ca_certs=/b", "option 'ssl_ca_certs' given twice"),
        ("memcaches://h:1?refresh=3", "SRV options need memcache+srv://"),
    ],
)
def test_bad_tls_options_are_refused_naming_them(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        MemcacheStore(url)
    assert message in str(caught.value)


def test_tls_twice_is_refused(pki: TlsFiles) -> None:
    with pytest.raises(ConfigurationError, match="TLS given twice"):
        MemcacheStore(f"memcaches://h:1?ssl_ca_certs={q(pki.ca)}", tls=True)
    with pytest.raises(ConfigurationError, match="tls='yes' must be True"):
        MemcacheStore("memcache://h:1", tls="yes")  # type: ignore[arg-type]


def test_the_url_says_what_it_means(pki: TlsFiles) -> None:
    where = parse_url(
        f"MEMCACHES://a:1,b?ssl_ca_certs={q(pki.ca)}&ssl_certfile={q(pki.client_cert)}"
        f"&ssl_keyfile={q(pki.client_key)}&ssl_check_hostname=FALSE"
    )
    assert where.addresses == (("a", 1), ("b", 11211))
    assert where.tls is not None
    assert (where.tls.ca_certs, where.tls.certfile, where.tls.keyfile) == (
        str(pki.ca),
        str(pki.client_cert),
        str(pki.client_key),
    )
    assert where.tls.check_hostname is False
    context = where.tls.context()
    assert context.check_hostname is False and context.verify_mode == ssl.CERT_REQUIRED
    assert parse_url("memcache://a").tls is None
    odd = parse_url("memcaches://a?ssl_ca_certs=%2Fcerts%2Fa%2520b+c.pem")  # a '%' in a name
    assert odd.tls is not None and odd.tls.ca_certs == "/certs/a%20b c.pem"
