"""``ratewarden serve`` on memcached over TLS (``--store memcaches://...``, upstream's
``MEMCACHE_TLS``) and on servers from a DNS SRV record (``--store memcache+srv://...``),
against a real TLS memcached and a real DNS server (dnsmasq) on loopback."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from ratewarden.storage.memcache import AsyncMemcacheStore
from tests._dns import DNSMASQ, DnsServer
from tests._memcached import MemcachedServer, TlsFiles, tls_files
from tests._servers import HOST
from tests.server.test_memcache_serve import RULES, ask, count, items, served
from tests.server_transport._process import RATEWARDEN
from tests.server_transport.conftest import OK, OVER_LIMIT
from tests.upstream.test_memcache_backend import calls_until_denied

Make = Callable[..., MemcachedServer]
NAME = "_memcache._tcp.rw.test"


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    (tmp_path / "pki").mkdir()
    return tls_files(tmp_path / "pki")


async def test_serve_over_tls_counts_in_memcached(
    tmp_path: Path, make_memcached: Make, pki: TlsFiles
) -> None:
    """--store memcaches://...?ssl_ca_certs=...: 3 an hour, then OVER_LIMIT; the item is in
    the TLS server (read on its plain port)."""
    server = make_memcached(tls=pki)
    async with served(tmp_path, server.url) as rls:
        assert isinstance(rls.store, AsyncMemcacheStore) and rls.store.tls is not None
        codes = [(await ask(rls, {"api_key": "t1"}))[0] for _ in range(4)]
    assert codes == [OK, OK, OK, OVER_LIMIT]
    [(_, entries)] = items(server).items()
    assert count(entries) == 3


async def test_serve_on_the_servers_of_an_srv_record(tmp_path: Path, make_memcached: Make) -> None:
    """--store memcache+srv://NAME?nameserver=...: the two servers the record lists hold
    the items, each key's item on one of them, counting as one server would."""
    if DNSMASQ is None:
        pytest.skip("no dnsmasq (scripts/test installs it)")
    two = [make_memcached(), make_memcached()]
    dns = DnsServer([(NAME, "localhost", mc.port) for mc in two])
    try:
        url = f"memcache+srv://{NAME}?nameserver={dns.nameserver}"
        async with served(tmp_path, url) as rls:
            assert sorted(rls.store.servers.names) == sorted(f"localhost:{mc.port}" for mc in two)  # type: ignore[attr-defined]
            for key in ("a", "b", "c", "d", "e", "f"):
                codes = [(await ask(rls, {"api_key": key}))[0] for _ in range(4)]
                assert codes == [OK, OK, OK, OVER_LIMIT], key
    finally:
        dns.stop()
    held = [items(mc) for mc in two]
    assert sum(len(found) for found in held) == 6
    assert all(count(entries) == 3 for found in held for entries in found.values())


def test_serve_on_upstreams_memcache_tls_variables_alone(
    tmp_path: Path, make_memcached: Make, pki: TlsFiles
) -> None:
    """ratewarden serve with upstream's variables only: BACKEND_TYPE=memcache,
    MEMCACHE_HOST_PORT, MEMCACHE_TLS=true and MEMCACHE_TLS_CACERT decide 3 an hour in that
    TLS memcached. (A call the store's 20 ms misses on a busy machine is answered by the
    rule's failure mode, uncharged: so the calls go on until the denial.)"""
    server = make_memcached(tls=pki)
    environ = {
        "BACKEND_TYPE": "memcache",
        "MEMCACHE_HOST_PORT": f"{HOST}:{server.port}",
        "MEMCACHE_TLS": "true",
        "MEMCACHE_TLS_CACERT": str(pki.ca),
    }
    codes = calls_until_denied(tmp_path, environ)
    assert codes[:3] == [OK] * 3 and codes[-1] == OVER_LIMIT
    [(_, entries)] = items(server).items()
    assert count(entries) == 3


def run_serve(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(RULES)
    ports = ("--grpc-port", "0", "--http-port", "0")
    return subprocess.run(
        [*RATEWARDEN, "serve", "--config", str(tmp_path / "rules.yaml"), *ports, *argv],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("RATEWARDEN_")},
    )


def test_an_srv_name_without_servers_or_an_unreadable_ca_exits_2(tmp_path: Path) -> None:
    """A record DNS does not have, a CA file that is not there: exit 2 with one line naming
    it, before any port opens."""
    if DNSMASQ is None:
        pytest.skip("no dnsmasq (scripts/test installs it)")
    dns = DnsServer([("_other._tcp.rw.test", "localhost", 1)])
    try:
        done = run_serve(tmp_path, "--store", f"memcache+srv://{NAME}?nameserver={dns.nameserver}")
    finally:
        dns.stop()
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("ratewarden serve: error: ")
    assert f"the SRV lookup of {NAME} failed" in done.stderr
    missing = quote(str(tmp_path / "no-ca.pem"), safe="")
    done = run_serve(tmp_path, "--store", f"memcaches://{HOST}:1?ssl_ca_certs={missing}")
    assert done.returncode == 2, done.stderr
    assert "ssl_ca_certs=" in done.stderr and "no-ca.pem" in done.stderr
