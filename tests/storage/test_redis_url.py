"""RedisStore.from_url / AsyncRedisStore.from_url: every scheme, and bad URLs named precisely."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT, RedisCluster, RedisServer

pytestmark = pytest.mark.redis

RATE = Rate.parse("100/minute", burst=20)


def decides(store: RedisStore) -> bool:
    try:
        return store.hit("gcra", "url-key", RATE).remaining == 19
    finally:
        store.close()


def test_redis_url_gets_the_store_timeout_on_its_client(redis_server: RedisServer) -> None:
    """redis://host:port/db: the client's socket and connect timeouts are the store's."""
    store = RedisStore.from_url(f"redis://{HOST}:{redis_server.port}/2", timeout=0.05)
    options = store.client.connection_pool.connection_kwargs
    assert (options["socket_timeout"], options["socket_connect_timeout"], options["db"]) == (
        0.05,
        0.05,
        2,
    )
    assert decides(store)
    with redis_server.client(db=2) as check:
        assert check.exists("rw:{url-key}:gcra:100:60000000:20")
        check.flushdb()


def test_valkey_scheme_is_the_same_as_redis(redis_client: redis.Redis) -> None:
    """valkey:// names the same thing as redis://."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    assert decides(
        RedisStore.from_url(f"valkey://{HOST}:{port}", clock=ManualClock(), timeout=STORE_TIMEOUT)
    )


def test_unix_socket_url(make_redis: Callable[..., RedisServer], tmp_path: Path) -> None:
    """unix:///path/to/redis.sock talks over the Unix socket."""
    socket_path = tmp_path / "redis.sock"
    make_redis([f"unixsocket {socket_path}", "unixsocketperm 700"])
    store = RedisStore.from_url(f"unix://{socket_path}", clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert str(socket_path) in repr(store)
    assert decides(store)


def test_password_in_the_url(make_redis: Callable[..., RedisServer]) -> None:
    """redis://:password@host authenticates; a wrong password is a StorageError, not an
    unavailable store: the server answered, and waiting will not help."""
    server = make_redis()
    with server.client() as admin:
        admin.config_set("requirepass", "s3cret")
    assert decides(
        RedisStore.from_url(f"redis://:s3cret@{HOST}:{server.port}/0", timeout=STORE_TIMEOUT)
    )
    wrong = RedisStore.from_url(f"redis://:nope@{HOST}:{server.port}/0")
    with pytest.raises(StorageError, match="refused the store's credentials") as refused:
        wrong.hit("gcra", "url-key", RATE)
    assert not isinstance(refused.value, StorageUnavailableError)


def test_rediss_url_speaks_tls(tls_redis: tuple[RedisServer, int, Path]) -> None:
    """rediss:// connects over TLS, verifying the server against the given CA."""
    _server, tls_port, ca = tls_redis
    store = RedisStore.from_url(f"rediss://{HOST}:{tls_port}/0", ssl_ca_certs=str(ca), timeout=0.5)
    assert decides(store)


async def test_async_rediss_url_speaks_tls(tls_redis: tuple[RedisServer, int, Path]) -> None:
    """The asyncio store pipelines over TLS too."""
    _server, tls_port, ca = tls_redis
    store = AsyncRedisStore.from_url(
        f"rediss://{HOST}:{tls_port}/0", ssl_ca_certs=str(ca), timeout=0.5, clock=ManualClock()
    )
    assert (await store.hit("gcra", "tls", RATE)).remaining == 19
    assert (await store.hit("gcra", "tls", RATE)).remaining == 18
    await store.aclose()


@pytest.mark.cluster
def test_cluster_url_with_several_startup_nodes(redis_cluster: RedisCluster) -> None:
    """redis+cluster://h1:p1,h2:p2 builds a Cluster client with the store's timeouts."""
    hosts = ",".join(f"{HOST}:{node.port}" for node in redis_cluster.nodes[:2])
    store = RedisStore.from_url(f"redis+cluster://{hosts}", timeout=0.5, clock=ManualClock())
    assert isinstance(store.client, redis.RedisCluster)
    assert decides(store)


@pytest.mark.cluster
async def test_async_cluster_url(redis_cluster: RedisCluster) -> None:
    """The asyncio store builds an asyncio Cluster client from the same URL form."""
    store = AsyncRedisStore.from_url(redis_cluster.url, timeout=0.5, clock=ManualClock())
    assert isinstance(store.client, aredis.RedisCluster)
    assert (await store.hit("gcra", "cluster-url", RATE)).allowed
    await store.aclose()


async def test_tls_cluster_url_uses_tls_connections() -> None:
    """rediss+cluster:// makes TLS connections to every node (no I/O until first use)."""
    store = AsyncRedisStore.from_url("rediss+cluster://10.0.0.1:7000,10.0.0.2:7000")
    node_kwargs = store.client.startup_nodes[0].connection_kwargs  # type: ignore[union-attr]
    assert node_kwargs["ssl_cert_reqs"] == "required"
    node_class = store.client.startup_nodes[0].connection_class  # type: ignore[union-attr]
    assert issubclass(node_class, aredis.SSLConnection)
    await store.client.aclose()


TLS_URLS = [
    "rediss://127.0.0.1:1/0",
    "rediss+sentinel://127.0.0.1:1/primary",
    "rediss+cluster://127.0.0.1:1",
]


@pytest.mark.parametrize("url", TLS_URLS)
@pytest.mark.parametrize("store_class", [RedisStore, AsyncRedisStore])
def test_a_tls_file_that_cannot_be_read_is_refused_when_the_store_is_built(
    url: str, store_class: type[RedisStore] | type[AsyncRedisStore], tmp_path: Path
) -> None:
    """A missing CA file, or a client certificate or key that is not PEM, is a
    ConfigurationError naming the option and the path at from_url (it used to build and
    fail each call as a store outage, 'Error 2 connecting'); the file's text is not shown."""
    missing = str(tmp_path / "no-ca.pem")
    garbage = tmp_path / "key.pem"
    garbage.write_text("not-a-key s3cret\n")
    cases = [
        ({"ssl_ca_certs": missing}, f"ssl_ca_certs={missing!r} cannot be read as PEM"),
        ({"ssl_certfile": missing}, f"ssl_certfile={missing!r}"),
        ({"ssl_certfile": str(garbage), "ssl_keyfile": str(garbage)}, f"{str(garbage)!r}"),
        ({"ssl_keyfile": str(garbage)}, "without ssl_certfile"),
    ]
    for options, words in cases:
        with pytest.raises(ConfigurationError, match="store URL") as caught:
            store_class.from_url(url, **options)
        assert words in str(caught.value)
        assert "s3cret" not in str(caught.value)


def test_a_tls_file_in_the_url_query_is_checked_too(tmp_path: Path) -> None:
    """rediss://...?ssl_ca_certs=PATH (what serve makes of REDIS_TLS_CACERT) is checked
    like the keyword option."""
    missing = tmp_path / "no-ca.pem"
    for store_class in (RedisStore, AsyncRedisStore):
        with pytest.raises(ConfigurationError, match=f"ssl_ca_certs={str(missing)!r}"):
            store_class.from_url(f"rediss://127.0.0.1:1/0?ssl_ca_certs={missing}")


BAD_URLS = [
    ("localhost:6379", "must look like"),
    ("http://localhost:6379", "scheme 'http'"),
    ("redis://localhost:abc/0", "port of host 'localhost:abc'"),
    ("redis://localhost:0/0", "port of host 'localhost:0'"),
    ("rediss://localhost:0", "port of host 'localhost:0'"),
    ("redis://localhost:6379/zero", "database 'zero'"),
    ("unix://", "no socket path"),
    ("redis+sentinel://10.0.0.1:26379", "no Sentinel service name"),
    ("redis+sentinel:///primary", "no host"),
    ("redis+sentinel://10.0.0.1:26379/primary/first", "database 'first'"),
    ("redis+sentinel://10.0.0.1:26379/primary/0/more", "path '/primary/0/more'"),
    ("redis+sentinel://10.0.0.1:2x/primary", "port '2x' of host '10.0.0.1:2x'"),
    ("redis+sentinel://h1:26379/primary?password=x", "query option 'password'"),
    ("redis+cluster://10.0.0.1:7000/3", "only database 0"),
    ("redis+cluster://10.0.0.1:70000", "port '70000'"),
    ("redis+cluster://10.0.0.1:7000,:7001", "host ':7001'"),
    ("redis://", "no host given; write redis://HOST"),
    ("redis:///3", "no host given"),
    ("rediss://:6380/0", "no host given; write rediss://HOST"),
    ("redis://:secret@/0", "no host given"),
    ("redis://10.0.0.1:6379/1?db=2", "given more than once and differs (/1 and db=2)"),
    ("redis://10.0.0.1:6379/?db=1&db=2", "(db=1 and db=2)"),
    ("unix:///run/redis.sock?db=1&db=2", "(db=1 and db=2); give it once, as ?db=DB"),
]


@pytest.mark.parametrize(("url", "part"), BAD_URLS)
def test_a_bad_url_is_a_configuration_error_naming_the_part(url: str, part: str) -> None:
    """Each malformed URL fails before any connection, and the message names what is wrong."""
    for store_class in (RedisStore, AsyncRedisStore):
        with pytest.raises(ConfigurationError, match="store URL") as caught:
            store_class.from_url(url)
        assert part in str(caught.value)


def test_the_same_database_in_the_path_and_the_query_is_taken() -> None:
    """/1?db=1 names one database twice: no refusal, and the client is on database 1."""
    for url in ("redis://10.0.0.1:6379/1?db=1", "redis://10.0.0.1:6379/01?db=1"):
        store = RedisStore.from_url(url)
        assert store.client.connection_pool.connection_kwargs["db"] == 1


def test_a_password_never_appears_in_an_error() -> None:
    """The URL in a message has its password replaced by ***."""
    with pytest.raises(ConfigurationError) as caught:
        RedisStore.from_url("redis+cluster://admin:hunter2@10.0.0.1:bad")
    assert "hunter2" not in str(caught.value)
    assert "admin:***@" in str(caught.value)


def test_an_option_redis_py_rejects_is_a_configuration_error() -> None:
    """Unknown client options (keyword or query string) fail at from_url, not at first use."""
    with pytest.raises(ConfigurationError, match="rejected an option"):
        RedisStore.from_url("redis://localhost:6379/0", no_such_option=1)
    with pytest.raises(ConfigurationError, match="rejected an option"):
        AsyncRedisStore.from_url("redis://localhost:6379/0?no_such_option=1")
