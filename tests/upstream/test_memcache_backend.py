"""envoyproxy/ratelimit's ``BACKEND_TYPE=memcache`` and its ``MEMCACHE_*`` settings.

``MEMCACHE_HOST_PORT`` becomes the store URL ``memcache://...`` (an entry with a ``/`` a
Unix socket, as upstream's client reads it), ``MEMCACHE_SRV`` (and its
refresh) ``memcache+srv://...``, ``MEMCACHE_TLS`` and its files ``memcaches://...?ssl_...``;
what cannot act is refused naming the variable; the rest of memcached's settings, and every
Redis one beside ``BACKEND_TYPE=memcache`` (upstream's memcache backend reads none), are
named in the start's "without effect" line. With the redis backend the ``MEMCACHE_*``
settings have no effect, as upstream's. (Serving over TLS and SRV for real:
``tests/server/test_memcache_tls_srv_serve.py``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_backend, upstream_env, upstream_settings
from ratewarden.server.settings import Settings, resolve
from ratewarden.storage import _memcache_url
from ratewarden.storage.memcache import parse_url
from tests._memcached import MemcachedServer, short_dir
from tests._servers import HOST
from tests.server.test_memcache_serve import RULES, count, items
from tests.server_transport.conftest import OK, OVER_LIMIT, request
from tests.upstream._serve import serve_rules
from tests.upstream.test_upstream_env import serve_start_log

CONFIG = {"config_paths": ["rules.yaml"]}
MEMCACHE = {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1:11211"}


def settings(**environ: str) -> Settings:
    return resolve(CONFIG, environ)


@pytest.mark.parametrize(
    ("host_port", "url"),
    [
        ("m1:11211", "memcache://m1:11211"),
        ("m1:11211, m2:11212", "memcache://m1:11211,m2:11212"),
        ("[::1]:11211,10.0.0.7:11211", "memcache://[::1]:11211,10.0.0.7:11211"),
    ],
)
def test_memcache_host_port_becomes_the_store_url(host_port: str, url: str) -> None:
    """BACKEND_TYPE=memcache (any case): MEMCACHE_HOST_PORT's servers, upstream's
    comma-separated HOST:PORT list, are the memcache store's."""
    chosen = settings(BACKEND_TYPE="Memcache", MEMCACHE_HOST_PORT=host_port)
    assert chosen.store_url == url
    assert chosen.store_per_second is None


@pytest.mark.parametrize(
    ("host_port", "url", "servers"),
    [
        (
            "/var/run/memcached/memcached.sock",
            "memcache:///var/run/memcached/memcached.sock",
            ("/var/run/memcached/memcached.sock",),
        ),
        (
            "m1:11211, /run/mc.sock,[::1]:11300",
            "memcache://m1:11211,/run/mc.sock,[::1]:11300",
            (("m1", 11211), "/run/mc.sock", ("::1", 11300)),
        ),
        (
            "/run/mc dir/100%.sock,/run/a?b#c.sock",
            "memcache:///run/mc%20dir/100%25.sock,/run/a%3Fb%23c.sock",
            ("/run/mc dir/100%.sock", "/run/a?b#c.sock"),
        ),
    ],
)
def test_memcache_host_port_entries_with_a_slash_are_unix_sockets(
    host_port: str, url: str, servers: tuple[object, ...]
) -> None:
    """An entry with a '/' in it is a Unix socket's path, as upstream's client (gomemcache)
    reads MEMCACHE_HOST_PORT; sockets and HOST:PORT mix in one list; the store URL writes a
    path percent-encoded and the store reads back the path as given."""
    chosen = settings(BACKEND_TYPE="memcache", MEMCACHE_HOST_PORT=host_port)
    assert chosen.store_url == url
    assert parse_url(url).addresses == servers


def test_a_relative_socket_path_is_taken_from_the_starting_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'run/mc.sock' (a '/' in it: a socket, as upstream's) is the socket under the
    directory ratewarden starts in, as upstream's client dials it."""
    monkeypatch.chdir(tmp_path)
    chosen = settings(BACKEND_TYPE="memcache", MEMCACHE_HOST_PORT="run/mc.sock,m1:1")
    assert parse_url(chosen.store_url).addresses == (str(tmp_path / "run/mc.sock"), ("m1", 1))


def test_the_settings_know_the_stores_longest_socket_path() -> None:
    """The settings may not import the store; their limit is the store's."""
    assert upstream_backend.MAX_SOCKET_PATH_BYTES == _memcache_url.MAX_SOCKET_PATH_BYTES


def test_the_redis_settings_beside_the_memcache_backend_change_nothing() -> None:
    """Upstream's memcache backend reads no Redis setting: REDIS_URL makes no Redis store,
    REDIS_TIMEOUT no timeout (ratewarden's 20 ms stands; upstream's memcached client waits its
    own 500 ms), REDIS_PERSECOND no per-second store, a REDIS_POOL_ON_EMPTY_BEHAVIOR upstream
    would refuse is not refused; all are named without effect. CACHE_KEY_PREFIX still is the
    key prefix, and --store-timeout still bounds each memcached call."""
    environ = {
        **MEMCACHE,
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "r:6379",
        "REDIS_TIMEOUT": "1s",
        "REDIS_PERSECOND": "true",
        "REDIS_PERSECOND_URL": "fast:6380",
        "REDIS_POOL_ON_EMPTY_BEHAVIOR": "CREATE",
        "REDIS_POOL_SIZE": "20",
        "CACHE_KEY_PREFIX": "edge_",
    }
    chosen = settings(**environ)
    assert (chosen.store_url, chosen.store_per_second) == ("memcache://m1:11211", None)
    assert (chosen.store_timeout, chosen.key_prefix) == (0.02, "edge_")
    redis = sorted(name for name in environ if name.startswith("REDIS_"))
    assert sorted(upstream_env.no_effect(environ)) == redis
    applied = upstream_settings.applied(environ)
    assert sorted(applied) == ["BACKEND_TYPE", "CACHE_KEY_PREFIX", "MEMCACHE_HOST_PORT"]
    own = resolve({**CONFIG, "store_timeout": "0.5"}, environ)
    assert (own.store_url, own.store_timeout) == ("memcache://m1:11211", 0.5)
    with pytest.raises(ConfigurationError, match="REDIS_TIMEOUT='10': must be a duration"):
        settings(**MEMCACHE, REDIS_TIMEOUT="10")  # checked still, as every setting


def test_memcaches_tuning_settings_have_no_effect_and_say_why() -> None:
    """MEMCACHE_MAX_IDLE_CONNS (one pipelined connection per server and process) and
    MEMCACHE_SRV_REFRESH without MEMCACHE_SRV are checked and named without effect;
    MEMCACHE_TLS=false is accepted."""
    environ = {
        **MEMCACHE,
        "MEMCACHE_MAX_IDLE_CONNS": "10",
        "MEMCACHE_SRV_REFRESH": "30s",
        "MEMCACHE_TLS": "false",
    }
    assert settings(**environ).store_url == "memcache://m1:11211"
    assert sorted(upstream_env.no_effect(environ)) == [
        "MEMCACHE_MAX_IDLE_CONNS",
        "MEMCACHE_SRV_REFRESH",
    ]
    advice = upstream_settings.UPSTREAM["MEMCACHE_MAX_IDLE_CONNS"].advice
    assert "one connection per memcached server" in advice
    with pytest.raises(ConfigurationError, match="MEMCACHE_MAX_IDLE_CONNS='many'"):
        settings(**MEMCACHE, MEMCACHE_MAX_IDLE_CONNS="many")
    with pytest.raises(ConfigurationError, match="MEMCACHE_SRV_REFRESH='soon'"):
        settings(**MEMCACHE, MEMCACHE_SRV_REFRESH="soon")


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        (
            {"MEMCACHE_SRV": "_memcache._tcp.cache.example.org"},
            "memcache+srv://_memcache._tcp.cache.example.org",
        ),
        (
            {"MEMCACHE_SRV": "_mc._tcp.c.example", "MEMCACHE_SRV_REFRESH": "1m30s"},
            "memcache+srv://_mc._tcp.c.example?refresh=90",
        ),
        (
            {"MEMCACHE_SRV": "_mc._tcp.c.example", "MEMCACHE_SRV_REFRESH": "500ms"},
            "memcache+srv://_mc._tcp.c.example?refresh=0.5",
        ),
        ({"MEMCACHE_HOST_PORT": "m1:11211", "MEMCACHE_TLS": "true"}, "memcaches://m1:11211"),
        (
            {
                "MEMCACHE_HOST_PORT": "m1:11211,m2:11211",
                "MEMCACHE_TLS": "true",
                "MEMCACHE_TLS_CACERT": "/etc/ca dir/ca.pem",
                "MEMCACHE_TLS_CLIENT_CERT": "/c.pem",
                "MEMCACHE_TLS_CLIENT_KEY": "/k.pem",
                "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
            },
            "memcaches://m1:11211,m2:11211?ssl_ca_certs=%2Fetc%2Fca+dir%2Fca.pem"
            "&ssl_certfile=%2Fc.pem&ssl_keyfile=%2Fk.pem&ssl_check_hostname=false",
        ),
        (
            {"MEMCACHE_SRV": "_mc._tcp.c", "MEMCACHE_TLS": "true", "MEMCACHE_SRV_REFRESH": "5s"},
            "memcaches+srv://_mc._tcp.c?refresh=5",
        ),
    ],
)
def test_memcache_srv_and_tls_become_the_store_url(environ: dict[str, str], url: str) -> None:
    """MEMCACHE_SRV (and MEMCACHE_SRV_REFRESH, a Go duration) and MEMCACHE_TLS (and its
    files) are mapped into the store URL, which the store reads back as meant."""
    chosen = settings(BACKEND_TYPE="memcache", **environ)
    assert chosen.store_url == url
    where = parse_url(url)
    assert where.srv == environ.get("MEMCACHE_SRV", "")
    assert (where.tls is not None) == (environ.get("MEMCACHE_TLS") == "true")
    if "MEMCACHE_TLS_CACERT" in environ:
        assert where.tls is not None and where.tls.ca_certs == environ["MEMCACHE_TLS_CACERT"]
        assert where.tls.check_hostname is False
    applied = set(upstream_settings.applied({"BACKEND_TYPE": "memcache", **environ}))
    assert applied == {"BACKEND_TYPE", *environ}


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE=memcache needs MEMCACHE_HOST_PORT"),
        ({**MEMCACHE, "MEMCACHE_SRV": "_m._tcp.x"}, "MEMCACHE_HOST_PORT and MEMCACHE_SRV are"),
        (
            {**MEMCACHE, "MEMCACHE_TLS_CACERT": "/ca.pem"},
            "MEMCACHE_TLS_CACERT, MEMCACHE_TLS_CLIENT_CERT, MEMCACHE_TLS_CLIENT_KEY, "
            "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION need MEMCACHE_TLS=true",
        ),
        (
            {**MEMCACHE, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
            "need MEMCACHE_TLS=true",
        ),
        (
            {**MEMCACHE, "MEMCACHE_TLS": "true", "MEMCACHE_TLS_CLIENT_CERT": "/c.pem"},
            "MEMCACHE_TLS_CLIENT_CERT and MEMCACHE_TLS_CLIENT_KEY go together",
        ),
        ({**MEMCACHE, "MEMCACHE_TLS": "maybe"}, "MEMCACHE_TLS='maybe'"),
        (
            {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1"},
            "MEMCACHE_HOST_PORT='m1': 'm1' is not HOST:PORT",
        ),
        (
            {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1:1,,m2:2"},
            "MEMCACHE_HOST_PORT='m1:1,,m2:2': an empty server",
        ),
        (
            {**MEMCACHE, "MEMCACHE_HOST_PORT": "m1:1,/run/mc.sock", "MEMCACHE_TLS": "true"},
            "MEMCACHE_HOST_PORT='m1:1,/run/mc.sock' lists a Unix socket and MEMCACHE_TLS=true",
        ),
        (
            {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "/" + "s" * 107},
            "is 108 bytes; a Unix socket's path holds 107 at most",
        ),
        (
            {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "/run/mc.sock, /run/mc.sock"},
            "names '/run/mc.sock' twice",
        ),
        (
            {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "/run/\udcff.sock"},
            "a socket path is not UTF-8",
        ),
        (
            {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "::1:11211"},
            "an IPv6 host goes in brackets",
        ),
        ({"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "[::1]"}, "is not [IPv6]:PORT"),
        ({"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1:70000"}, "port '70000'"),
        ({"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1:1,m1:1"}, "'m1:1' twice"),
        ({"BACKEND_TYPE": "etcd"}, "BACKEND_TYPE='etcd': must be redis or memcache"),
    ],
)
def test_what_the_memcache_store_cannot_do_stops_the_start_naming_the_variable(
    environ: dict[str, str], message: str
) -> None:
    """No MEMCACHE_HOST_PORT nor MEMCACHE_SRV, both, TLS files without MEMCACHE_TLS=true, half
    a client certificate, a server that is not HOST:PORT nor a socket path (or a path too
    long, or TLS asked for a socket): refused, naming the variable."""
    with pytest.raises(ConfigurationError) as caught:
        settings(**environ)
    assert message in str(caught.value)
    assert str(caught.value).startswith(("BACKEND_TYPE", "MEMCACHE_"))


def test_with_the_redis_backend_memcaches_settings_have_no_effect_whatever_their_value() -> None:
    """BACKEND_TYPE unset or redis: MEMCACHE_SRV and MEMCACHE_TLS=true are not refused (the
    redis backend reads neither, as upstream's), only named without effect."""
    environ = {
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "r:6379",
        "MEMCACHE_HOST_PORT": "m:11211",
        "MEMCACHE_SRV": "_memcache._tcp.example.org",
        "MEMCACHE_TLS": "true",
    }
    for backend in ({}, {"BACKEND_TYPE": "redis"}):
        assert settings(**environ, **backend).store_url == "redis://r:6379/0"
        assert sorted(upstream_env.no_effect({**environ, **backend})) == [
            "MEMCACHE_HOST_PORT",
            "MEMCACHE_SRV",
            "MEMCACHE_TLS",
        ]
    assert settings(MEMCACHE_HOST_PORT="m:11211").store_url == "memory"


def test_serve_logs_the_redis_settings_without_effect_beside_memcache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ratewarden serve` on BACKEND_TYPE=memcache with REDIS_URL set: MEMCACHE_HOST_PORT is
    named as applied, REDIS_URL as without effect."""
    environ = {**MEMCACHE, "REDIS_URL": "r:6379", "MEMCACHE_MAX_IDLE_CONNS": "4"}
    _, lines = serve_start_log(tmp_path, monkeypatch, capsys, environ)
    [applied] = [line for line in lines if line.get("event") == "upstream_settings_applied"]
    [unused] = [line for line in lines if line.get("event") == "upstream_settings_without_effect"]
    assert sorted(applied["settings"]) == ["BACKEND_TYPE", "MEMCACHE_HOST_PORT"]
    assert sorted(unused["settings"]) == ["MEMCACHE_MAX_IDLE_CONNS", "REDIS_URL"]


def test_serve_on_upstreams_memcache_variables_alone_counts_in_that_memcached(
    tmp_path: Path, memcached: MemcachedServer
) -> None:
    """ratewarden serve with no RATEWARDEN_* setting: BACKEND_TYPE=memcache and
    MEMCACHE_HOST_PORT (beside a REDIS_URL it must not use) decide 3 an hour in that
    memcached, under CACHE_KEY_PREFIX. A call the store's 20 ms misses on a busy machine
    is answered by the rule's failure mode, uncharged: so the calls go on until the denial,
    which comes when memcached counts 3."""
    environ = {
        "BACKEND_TYPE": "memcache",
        "MEMCACHE_HOST_PORT": f"{HOST}:{memcached.port}",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"{HOST}:1",
        "CACHE_KEY_PREFIX": "up",
    }
    codes = calls_until_denied(tmp_path, environ)
    assert codes[:3] == [OK] * 3 and codes[-1] == OVER_LIMIT
    [(name, entries)] = items(memcached).items()
    assert name.startswith("up:{") and count(entries) == 3


def test_serve_on_upstreams_variables_counts_in_a_memcached_on_a_unix_socket(
    tmp_path: Path, make_memcached: Callable[..., MemcachedServer]
) -> None:
    """MEMCACHE_HOST_PORT listing a TCP memcached and one on a Unix socket, as upstream's
    mixed lists: ratewarden serve decides 3 an hour per key, each key's item on one of the
    two servers, until both hold some (rendezvous hashing: at most 30 keys)."""
    with short_dir() as directory:
        memcached, unix = make_memcached(), make_memcached(unix_socket=directory / "mc.sock")
        environ = {
            "BACKEND_TYPE": "memcache",
            "MEMCACHE_HOST_PORT": f"{HOST}:{memcached.port},{unix.unix_socket}",
        }
        with served_upstream(tmp_path, environ) as stub:
            keys: list[str] = []
            while 0 in (held(memcached), held(unix)) and len(keys) < 30:
                keys.append(f"key-{len(keys)}")
                codes = calls_until_denied_on(stub, keys[-1])
                assert codes[:3] == [OK] * 3 and codes[-1] == OVER_LIMIT, keys
        on_tcp, on_socket = items(memcached), items(unix)
        assert on_tcp and on_socket
        found = {**on_tcp, **on_socket}
        assert len(found) == len(keys) and all(count(e) == 3 for e in found.values())


def held(server: MemcachedServer) -> int:
    """The live items ``server`` holds. Not its ``curr_items``: that still counts the items a
    ``flush_all`` invalidated until memcached reclaims them, so the session's flushed server
    could look as if it held this test's items while it held none."""
    return len(items(server))


def calls_until_denied(tmp_path: Path, environ: dict[str, str]) -> list[int]:
    """``ratewarden serve`` on ``environ`` alone and RULES: the overall codes of calls on
    one api_key until the first OVER_LIMIT (20 at most)."""
    with served_upstream(tmp_path, environ) as stub:
        return calls_until_denied_on(stub, "k")


@contextmanager
def served_upstream(
    tmp_path: Path, environ: dict[str, str], rules: str = RULES
) -> Iterator[rls_pb2_grpc.RateLimitServiceStub]:
    """``ratewarden serve`` on ``environ`` alone and ``rules``, a stub on its gRPC port."""
    with (
        serve_rules(tmp_path, rules, **environ) as (_, grpc_port),
        grpc.insecure_channel(f"{HOST}:{grpc_port}") as channel,
    ):
        yield rls_pb2_grpc.RateLimitServiceStub(channel)


def calls_until_denied_on(stub: rls_pb2_grpc.RateLimitServiceStub, key: str) -> list[int]:
    """The overall codes of calls on api_key ``key`` until the first OVER_LIMIT (20 at
    most): a call the store's 20 ms misses is answered by the failure mode, uncharged."""
    codes: list[int] = []
    while OVER_LIMIT not in codes and len(codes) < 20:
        reply = stub.ShouldRateLimit(request("mc", {"api_key": key}), timeout=5)
        codes.append(reply.overall_code)
    return codes
