"""Findings of the second HA walk of the Redis store (/tmp/walk_reports/storage_ha2.md).

- An ACL that forbids the store's keys, its scripts or TIME fails ``ping()`` as a
  ``StorageError`` (the server answered: not an outage), as it fails every call; the calls
  say which permission is missing (``ratewarden serve`` refuses to start on it:
  tests/server/test_serve_store_acl.py).
- Connection options the store sets itself (``socket_timeout``, ``retry*``, ``protocol``)
  are refused, not silently replaced; so are TLS options on a URL without TLS (a
  ``redis+cluster://`` one included), and a ``db=`` that differs from the URL's.
- ``db=`` reaches a Sentinel primary's connections when the URL names no database.
- ``AsyncRedisStore`` on ``rediss://`` builds its SSL context in ``from_url``.
- A Sentinel's "No master found" says whether the Sentinels know the service at all.
- A server that does not speak Redis's protocol (a memcached's port) is a StorageError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis import exceptions as rx

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.storage._redis_errors import connect_failure
from ratewarden.storage._redis_sentinel import TellingSentinel
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.storage.regions import RegionStore
from tests._memcached import MemcachedServer
from tests._servers import HOST, STORE_TIMEOUT, RedisSentinel, RedisServer

RATE = Rate.parse("5/second")
STORES = (RedisStore, AsyncRedisStore, RegionStore)

#: What a store needs: its scripts (and what they call), PING, TIME, and DEL for reset.
STORE_COMMANDS = (
    "+evalsha +eval +ping +del +get +set +hset +hdel +hgetall +pexpire +lrange +ltrim +rpush +time"
)
#: ACL users, each missing one thing the store needs, and the words its refusal holds.
SHORT_USERS = {
    "keys": (f"~rw* {STORE_COMMANDS}", "app", "no permissions to access one of the keys"),
    "scripts": (f"~* {STORE_COMMANDS} -evalsha -eval", "rw", "'evalsha'"),
    "clock": (f"~* {STORE_COMMANDS} -time", "rw", "'time'"),
}


@pytest.fixture
def acl_redis(make_redis: Callable[..., RedisServer]) -> Iterator[RedisServer]:
    """A redis-server of this test's own with the users of SHORT_USERS and one that has
    exactly what the store needs (``enough``)."""
    server = make_redis()
    with server.client() as admin:
        for user, (rules, _prefix, _words) in SHORT_USERS.items():
            admin.execute_command("ACL", "SETUSER", user, "on", ">pw", *rules.split())
        admin.execute_command(
            "ACL", "SETUSER", "enough", "on", ">pw", "~rw*", *STORE_COMMANDS.split()
        )
    yield server


def _url(server: RedisServer, user: str) -> str:
    return f"redis://{user}:pw@{HOST}:{server.port}/0"


def _refused_by_acl(error: BaseException, words: str) -> None:
    message = str(error)
    assert isinstance(error, StorageError), message
    assert not isinstance(error, StorageUnavailableError), message  # it answered
    assert words in message
    assert "the ACL of the store's user" in message
    assert "waiting will not help" in message


@pytest.mark.redis
@pytest.mark.parametrize("user", sorted(SHORT_USERS))
def test_ping_raises_when_the_acl_forbids_what_every_call_needs(
    acl_redis: RedisServer, user: str
) -> None:
    """ping() used to answer True (PING alone) while every call failed NOPERM."""
    _rules, prefix, words = SHORT_USERS[user]
    store = RedisStore.from_url(_url(acl_redis, user), prefix=prefix, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageError) as pinged:
            store.ping()
        _refused_by_acl(pinged.value, words)
        if user != "clock":  # a script's refused TIME names the script's line, not TIME
            with pytest.raises(StorageError) as hit:
                store.hit("fixed_window", "k", RATE)
            _refused_by_acl(hit.value, words)
    finally:
        store.close()


@pytest.mark.redis
@pytest.mark.parametrize("user", sorted(SHORT_USERS))
async def test_the_asyncio_store_s_ping_raises_the_same(acl_redis: RedisServer, user: str) -> None:
    """AsyncRedisStore.ping: the same probe, the same StorageError."""
    _rules, prefix, words = SHORT_USERS[user]
    store = AsyncRedisStore.from_url(_url(acl_redis, user), prefix=prefix, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        _refused_by_acl(pinged.value, words)
    finally:
        await store.aclose()


@pytest.mark.redis
async def test_a_user_with_just_what_the_store_needs_pings_true(acl_redis: RedisServer) -> None:
    """The probe asks for nothing more than the calls need, and writes nothing."""
    sync = RedisStore.from_url(_url(acl_redis, "enough"), timeout=STORE_TIMEOUT)
    asyncio_store = AsyncRedisStore.from_url(_url(acl_redis, "enough"), timeout=STORE_TIMEOUT)
    try:
        assert sync.ping() is True
        assert await asyncio_store.ping() is True
        assert sync.hit("fixed_window", "k", RATE).allowed
    finally:
        sync.close()
        await asyncio_store.aclose()
    with acl_redis.client() as admin:
        assert [key for key in admin.scan_iter() if b"ratewarden-ping" in key] == []


@pytest.mark.redis
def test_ping_is_false_not_raised_when_the_server_does_not_answer(
    make_redis: Callable[..., RedisServer],
) -> None:
    """An outage stays an outage: the probe's StorageUnavailableError is ping's False."""
    server = make_redis()
    store = RedisStore.from_url(f"redis://{HOST}:{server.port}/0", timeout=STORE_TIMEOUT)
    try:
        assert store.ping() is True
        server.stop()
        assert store.ping() is False
    finally:
        store.close()


# -- options the store would not use ------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "options", "words"),
    [
        ("redis://h:6379/0?socket_timeout=5", {}, "query option socket_timeout is not used"),
        ("redis://h:6379/0", {"socket_timeout": 5}, "keyword option socket_timeout is not used"),
        ("redis://h:6379/0", {"socket_connect_timeout": 5}, "socket_connect_timeout is not"),
        ("redis+sentinel://h:26379/m", {"socket_timeout": 5}, "socket_timeout is not used"),
        ("redis+cluster://h:6379", {"socket_timeout": 5}, "socket_timeout is not used"),
        ("redis://h:6379/0", {"retry_on_timeout": True}, "never retries on its own"),
        ("redis://h:6379/0?retry_on_timeout=yes", {}, "never retries on its own"),
        ("redis+cluster://h:6379", {"retry": None}, "never retries on its own"),
        ("redis://h:6379/0?protocol=3", {}, "speaks RESP2"),
    ],
)
def test_connection_options_the_store_sets_itself_are_refused(
    url: str, options: dict[str, Any], words: str
) -> None:
    """They used to be accepted and then replaced by the store's on its connections."""
    for store_class in STORES:
        with pytest.raises(ConfigurationError) as refused:
            store_class.from_url(url, **options)
        message = str(refused.value)
        assert words in message
        if "timeout" in words:
            assert "timeout=" in message
            assert "--store-timeout" in message


def test_a_plain_url_s_clients_get_the_store_s_timeout() -> None:
    """What the refusal leaves: the store's timeout on the client it makes."""
    store = RedisStore.from_url("redis://h:6379/0", timeout=0.05)
    kwargs = store.client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.05, 0.05)


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("redis+cluster://h:6379", "rediss+cluster://"),
        ("redis+sentinel://h:26379/m", "rediss+sentinel://"),
        ("redis://h:6379/0", "rediss://"),
    ],
)
def test_tls_options_on_a_url_without_tls_name_the_tls_scheme(url: str, scheme: str) -> None:
    """redis+cluster:// used to drop ssl_ca_certs and connect in plaintext."""
    for store_class in STORES:
        with pytest.raises(ConfigurationError) as refused:
            store_class.from_url(url, ssl_ca_certs="/etc/ca.pem")
        message = str(refused.value)
        assert "ssl_ca_certs is a TLS option, and the URL is not TLS" in message
        assert f"use {scheme} for TLS" in message


def test_a_tls_option_in_a_plain_url_s_query_names_rediss() -> None:
    """redis://...?ssl_ca_certs=... said only that redis-py took no such keyword."""
    with pytest.raises(ConfigurationError, match="use rediss:// for TLS"):
        RedisStore.from_url("redis://h:6379/0?ssl_ca_certs=/etc/ca.pem")


def test_a_timeout_in_a_plain_url_names_where_it_goes() -> None:
    """redis://...?timeout=1: the message names timeout= and --store-timeout, as the other
    URL forms' do."""
    with pytest.raises(ConfigurationError) as refused:
        RedisStore.from_url("redis://h:6379/0?timeout=1")
    assert "from_url's timeout=" in str(refused.value)
    assert "--store-timeout" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    ["redis://h:6379/3", "redis://h:6379?db=3", "redis+sentinel://h:26379/m/3"],
)
def test_a_db_option_that_differs_from_the_url_s_is_refused(url: str) -> None:
    """The URL's database used to win silently over the keyword."""
    for store_class in STORES:
        with pytest.raises(ConfigurationError, match="the database is given twice and differs"):
            store_class.from_url(url, db=5)
        store_class.from_url(url, db=3)  # the same one twice is not a conflict


@pytest.mark.redis
def test_a_db_option_reaches_a_sentinel_primary(redis_sentinel: RedisSentinel) -> None:
    """redis+sentinel://.../service with db=5 used to decide on database 0."""
    store = RedisStore.from_url(redis_sentinel.url, db=5, timeout=STORE_TIMEOUT)
    try:
        store.hit("fixed_window", "sentinel-db", RATE)
    finally:
        store.close()
    with redis_sentinel.primary.client(db=5) as primary:
        try:
            assert primary.keys("rw:{sentinel-db}:*")
        finally:
            primary.flushdb()


# -- the asyncio store's SSL context ------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["rediss://h:6379/0", "rediss+sentinel://h:26379/m", "rediss+cluster://h:6379"]
)
def test_the_asyncio_store_builds_its_ssl_context_in_from_url(url: str) -> None:
    """redis-py built it at the first connect, inside the first call's 20 ms timeout; now
    every connection the store makes holds one context, built before any call."""
    store = AsyncRedisStore.from_url(url, ssl_cert_reqs="none")
    client: Any = store.client
    if hasattr(client, "connection_pool"):
        pool = client.connection_pool
        make = lambda: pool.connection_class(**pool.connection_kwargs)  # noqa: E731
    else:
        node = next(iter(client.nodes_manager.startup_nodes.values()))
        make = lambda: node.connection_class(**node.connection_kwargs)  # noqa: E731
    first, second = make(), make()
    assert first.ssl_context.context is not None
    assert first.ssl_context is second.ssl_context


# -- Sentinel words -----------------------------------------------------------------------


@pytest.mark.redis
def test_no_master_found_for_an_unknown_service_asks_about_the_hosts(
    redis_sentinel: RedisSentinel,
) -> None:
    """Every sentinel answered and none knows the service: a settings mistake."""
    url = redis_sentinel.url.rsplit("/", 1)[0] + "/no-such-service"
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            store.hit("fixed_window", "k", RATE)
    finally:
        store.close()
    assert "no host knows that service: is each host a sentinel watching it?" in str(caught.value)


@pytest.mark.redis
def test_no_master_found_for_a_known_service_does_not_blame_the_settings(
    redis_sentinel: RedisSentinel,
) -> None:
    """The sentinels know the service but name no primary that is up (here: judged so by
    min_other_sentinels, as during a failover's odown): no question about the hosts."""
    hosts = [(HOST, s.port) for s in redis_sentinel.sentinels]
    sentinel = TellingSentinel(hosts, min_other_sentinels=5, socket_timeout=STORE_TIMEOUT)
    with pytest.raises(rx.ConnectionError) as caught:
        sentinel.discover_master(redis_sentinel.service)
    message = str(caught.value)
    assert "but name no primary that is up: it is down, or a failover is under way" in message
    assert "is each host a sentinel" not in message


def test_a_connection_whose_setup_times_out_is_not_called_unreachable() -> None:
    """A hung primary takes the TCP connection and never answers HELLO: "cannot connect"
    misled; a timeout while connecting still says so."""
    read = connect_failure("Sentinel service 'm'", rx.TimeoutError("Timeout reading from h:1"))
    assert read.startswith("Sentinel service 'm' took the connection but did not answer")
    made = connect_failure("h:1", rx.TimeoutError("Timeout connecting to server"))
    assert made.startswith("cannot connect to h:1")
    assert connect_failure("h:1", ConnectionRefusedError(111, "refused")).startswith("cannot")


@pytest.mark.redis
async def test_a_memcached_port_given_as_redis_is_not_an_outage(memcached: MemcachedServer) -> None:
    """Its reply to HELLO is not Redis's protocol: every call and ping raise StorageError
    saying so (ping used to answer False, and serve to start never serving)."""
    url = f"redis://{HOST}:{memcached.port}/0"
    sync = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    asyncio_store = AsyncRedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        for attempt in (lambda: sync.hit("fixed_window", "k", RATE), sync.ping):
            with pytest.raises(StorageError) as caught:
                attempt()
            assert not isinstance(caught.value, StorageUnavailableError)
            assert "does not speak the Redis protocol" in str(caught.value)
        with pytest.raises(StorageError, match="does not speak the Redis protocol") as pinged:
            await asyncio_store.ping()
        assert not isinstance(pinged.value, StorageUnavailableError)
    finally:
        sync.close()
        await asyncio_store.aclose()
