"""Why a Sentinel store found no primary: an outage, or a setting that waiting will not fix.

Every sentinel out of reach (nothing listening, or hung) is an outage: the message names each
host and what it met, and does not ask whether each host is a sentinel watching the service
(redis-py 8 writes its errors as ``network:ConnectionError``, which the old test on the text,
``ConnectionError(``, never matched, so every outage blamed the settings). A sentinel that
refuses the store's sentinel password, or wants one the URL does not give, is a
``StorageError`` naming ``sentinel_password``, as a data server refusing the URL's password is:
``ping`` raises it and ``ratewarden serve`` refuses to start, so an open failure mode never
turns it into allowing every request (walk storage_ha4, D2 and D3). Every host answering as no
sentinel does is tests/storage/test_redis_sentinel_not_a_sentinel.py; every host answering and
none knowing the service, tests/storage/test_walk_storage_ha2.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import HOST, STORE_TIMEOUT, RedisSentinel, SilentServer, free_port

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")
SENTINEL_PASSWORD = "sentinel-pw"
WRONG = "not-the-sentinel-pw"
SETTINGS_QUESTION = "is each host a sentinel watching it?"


@pytest.fixture(scope="module")
def guarded_sentinel() -> Iterator[RedisSentinel]:
    """A primary, a replica and a Sentinel that wants a password (``requirepass``)."""
    setup = RedisSentinel(sentinels=1, sentinel_password=SENTINEL_PASSWORD)
    yield setup
    setup.stop()


def out_of_reach(count: int = 2) -> str:
    """Sentinel hosts on loopback ports nothing listens on."""
    return ",".join(f"{HOST}:{free_port()}" for _ in range(count))


def refused(error: StorageError) -> str:
    """A refusal, not an outage, and without the password tried."""
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    assert "waiting will not help" in message
    assert WRONG not in message
    assert SETTINGS_QUESTION not in message
    return message


def test_every_sentinel_out_of_reach_is_an_outage_that_blames_no_setting() -> None:
    """Nothing listens on either port: each host named with its connection error, ping
    False, and no question about the settings."""
    hosts = out_of_reach()
    store = RedisStore.from_url(f"redis+sentinel://{hosts}/mymaster", timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            store.hit("gcra", "k", RATE)
        assert store.ping() is False
    finally:
        store.close()
    message = str(caught.value)
    for host in hosts.split(","):
        assert f"sentinel {host} - ConnectionError: " in message
    assert SETTINGS_QUESTION not in message
    assert SETTINGS_QUESTION not in str(store.last_ping_error)


async def test_the_asyncio_store_says_the_same_of_sentinels_out_of_reach() -> None:
    """AsyncRedisStore: the same outage, without the settings question."""
    url = f"redis+sentinel://{out_of_reach()}/mymaster"
    store = AsyncRedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            await store.hit("gcra", "k", RATE)
    finally:
        await store.aclose()
    assert "ConnectionError: " in str(caught.value)
    assert SETTINGS_QUESTION not in str(caught.value)


def test_a_hung_sentinel_is_an_outage_that_blames_no_setting(silent_server: SilentServer) -> None:
    """A sentinel that takes the connection and never answers: a timeout, an outage."""
    url = f"redis+sentinel://{HOST}:{silent_server.port}/mymaster"
    store = RedisStore.from_url(url, timeout=0.2)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            store.hit("gcra", "k", RATE)
    finally:
        store.close()
    assert f"sentinel {HOST}:{silent_server.port} - TimeoutError: " in str(caught.value)
    assert SETTINGS_QUESTION not in str(caught.value)


def test_a_wrong_sentinel_password_is_a_storage_error(guarded_sentinel: RedisSentinel) -> None:
    """Every hit and ping raise a StorageError naming the sentinel password option."""
    url = f"{guarded_sentinel.url}?sentinel_password={WRONG}"
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        for call in (lambda: store.hit("gcra", "k", RATE), store.ping):
            with pytest.raises(StorageError) as caught:
                call()
            message = refused(caught.value)
            assert "refused the store's sentinel credentials" in message
            assert "sentinel_password" in message
            assert "REDIS_SENTINEL_AUTH" in message
    finally:
        store.close()


async def test_the_asyncio_store_refuses_a_wrong_sentinel_password_the_same(
    guarded_sentinel: RedisSentinel,
) -> None:
    """AsyncRedisStore: the same StorageError on a hit and on ping."""
    url = f"{guarded_sentinel.url}?sentinel_password={WRONG}"
    store = AsyncRedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", "k", RATE)
        assert "refused the store's sentinel credentials" in refused(caught.value)
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        assert "refused the store's sentinel credentials" in refused(pinged.value)
    finally:
        await store.aclose()


def test_no_sentinel_password_for_a_sentinel_that_wants_one_says_so(
    guarded_sentinel: RedisSentinel,
) -> None:
    """No sentinel_password at all: "needs a password, and the store is given none"."""
    store = RedisStore.from_url(guarded_sentinel.url, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageError) as caught:
            store.ping()
    finally:
        store.close()
    message = refused(caught.value)
    assert "a sentinel needs a password, and the store is given none" in message
    assert "?sentinel_password=" in message


def test_the_right_sentinel_password_decides(guarded_sentinel: RedisSentinel) -> None:
    """The same Sentinel with its password: the store pings and decides."""
    url = f"{guarded_sentinel.url}?sentinel_password={SENTINEL_PASSWORD}"
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        assert store.ping() is True
        assert store.hit("gcra", "right-password", RATE).allowed
    finally:
        store.close()


def test_a_refusal_stands_when_another_sentinel_is_out_of_reach(
    guarded_sentinel: RedisSentinel,
) -> None:
    """One sentinel refuses the password, the other cannot be reached: the password is
    still wrong, and waiting for the other would not make it right."""
    hosts = f"{guarded_sentinel.hosts},{out_of_reach(1)}"
    url = f"redis+sentinel://{hosts}/{guarded_sentinel.service}?sentinel_password={WRONG}"
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageError) as caught:
            store.ping()
    finally:
        store.close()
    message = refused(caught.value)
    assert "AuthenticationError" in message
    assert "ConnectionError" in message


def test_serve_exits_2_on_a_wrong_sentinel_password(
    guarded_sentinel: RedisSentinel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ratewarden serve: exit 2 and one line, not a service whose open failure mode allows
    every request."""
    from ratewarden.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "domain: auth\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 2}\n"
    )
    url = f"{guarded_sentinel.url}?sentinel_password={WRONG}"
    argv = ["serve", "--config", str(rules), "--store", url, "--grpc-port", "0"]
    assert main([*argv, "--http-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("ratewarden serve: error: the store cannot be used: ")
    assert "refused the store's sentinel credentials" in err[0]
    assert WRONG not in err[0]
