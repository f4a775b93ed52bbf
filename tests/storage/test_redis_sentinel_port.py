"""A plain ``redis://`` URL given a Sentinel's port is refused, not decided on.

A Sentinel answers ``PING`` and ``HELLO``, and refuses every script as an unknown
command: the store reported SERVING and every call failed as "a bug or a server
misconfiguration". ``HELLO`` says ``mode sentinel``, so the first connection refuses
it, naming the URL to use instead (``_redis_server.check_hello``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.storage._redis_server import ServerUnusable, check_hello
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisSentinel

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


@pytest.fixture(scope="module")
def sentinel() -> Iterator[RedisSentinel]:
    setup = RedisSentinel(sentinels=1)
    yield setup
    setup.stop()


def refused(error: StorageError, port: int) -> str:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError)  # it answered: not an outage
    assert f"127.0.0.1:{port} is a Redis Sentinel" in message
    assert f"redis+sentinel://127.0.0.1:{port}/SERVICE" in message
    return message


def test_hello_from_a_sentinel_is_refused() -> None:
    """The reply a Sentinel sends to ``HELLO 2`` (Redis 7.0), as a RESP2 connection reads it."""
    reply = [b"server", b"redis", b"version", b"7.0.15", b"proto", 2, b"id", 5,
             b"mode", b"sentinel", b"modules", []]  # fmt: skip
    with pytest.raises(ServerUnusable, match="is a Redis Sentinel"):
        check_hello(reply, "10.0.0.1:26379")


def test_the_blocking_store_refuses_a_sentinel_on_ping_and_hit(sentinel: RedisSentinel) -> None:
    """``ping`` no longer says True, and a hit says what to do instead of "a bug"."""
    port = sentinel.sentinels[0].port
    store = RedisStore.from_url(f"redis://127.0.0.1:{port}", timeout=1.0)
    try:
        with pytest.raises(StorageError) as pinged:
            store.ping()
        refused(pinged.value, port)
        with pytest.raises(StorageError) as hit:
            store.hit("fixed_window", "k", RATE)
        assert "a bug" not in refused(hit.value, port)
    finally:
        store.close()


async def test_the_asyncio_store_refuses_a_sentinel_too(sentinel: RedisSentinel) -> None:
    port = sentinel.sentinels[0].port
    store = AsyncRedisStore(aredis.Redis(host="127.0.0.1", port=port), timeout=1.0)
    try:
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        refused(pinged.value, port)
        with pytest.raises(StorageError) as hit:
            await store.hit("fixed_window", "k", RATE)
        refused(hit.value, port)
    finally:
        await store.aclose()
        await store.client.aclose()


def test_the_sentinel_url_still_reaches_the_primary(sentinel: RedisSentinel) -> None:
    """The check is on the server a connection reaches: a Sentinel URL's is the primary."""
    store = RedisStore.from_url(sentinel.url, timeout=1.0)
    try:
        assert store.ping()
        assert store.hit("fixed_window", "k", RATE).allowed
    finally:
        store.close()


async def test_serve_refuses_to_start_on_a_sentinel_port(
    sentinel: RedisSentinel, tmp_path: Path
) -> None:
    """``ratewarden serve --store redis://<sentinel>`` stops at start (exit 2 on the command
    line), as for a Redis too old, instead of reporting SERVING."""
    port = sentinel.sentinels[0].port
    (tmp_path / "rules.yaml").write_text(
        "domain: d\ndescriptors:\n  - key: k\n"
        "    rate_limit: {unit: second, requests_per_unit: 5}\n"
    )
    server = RateLimitServer(
        Settings(
            config_paths=(str(tmp_path / "rules.yaml"),),
            store_url=f"redis://127.0.0.1:{port}",
            grpc_port=0,
            http_port=0,
            reload_interval=0,
        )
    )
    try:
        with pytest.raises(ConfigurationError) as started:
            await server.start()
    finally:
        await server.close()
    assert f"redis+sentinel://127.0.0.1:{port}/SERVICE" in str(started.value)
