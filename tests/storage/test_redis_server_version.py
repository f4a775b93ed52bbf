"""A Redis too old for the scripts is refused when a connection opens, never decided on.

No Redis older than 6.2 is at hand on this machine, so the refusal is shown on the real
servers (Redis 7.0, its Cluster, Valkey) with the minimum raised past them
(``_redis_server.MIN_REDIS``): the server is real, only the line it must pass moves. The
reading of ``HELLO``'s reply is pure logic, checked on the replies each server sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.storage import _redis_server
from ratewarden.storage._redis_server import ServerUnusable, check_hello
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisCluster, RedisServer, free_port

#: An hour: two hits on Redis TIME all but never straddle a window (with 5/second they once did,
#: a few ms apart, and the second found a fresh window: remaining 4, not 3).
RATE = Rate.parse("5/hour")
WHERE = "127.0.0.1:6379"


def hello(server: str, version: str) -> list[bytes | int | list[object]]:
    """``HELLO 2``'s reply as a RESP2 connection reads it."""
    return [
        b"server", server.encode(), b"version", version.encode(), b"proto", 2,
        b"id", 7, b"mode", b"standalone", b"role", b"master", b"modules", [],
    ]  # fmt: skip


# --- reading the reply (pure logic) -----------------------------------------------------


@pytest.mark.parametrize("version", ["6.0.16", "6.0.0", "5.9.104", "6.1.99"])
def test_a_redis_older_than_6_2_is_refused_with_the_version_found_and_the_one_needed(
    version: str,
) -> None:
    with pytest.raises(ServerUnusable) as refused:
        check_hello(hello("redis", version), WHERE)
    message = str(refused.value)
    assert WHERE in message
    assert f"Redis {version}" in message
    assert "6.2 or later" in message


@pytest.mark.parametrize("version", ["6.2.0", "6.2.14", "7.0.15", "7.4.2", "8.2.1", "10.0.0"])
def test_redis_6_2_and_later_pass(version: str) -> None:
    check_hello(hello("redis", version), WHERE)


@pytest.mark.parametrize("version", ["7.2.4", "8.1.8"])
def test_every_valkey_passes(version: str) -> None:
    check_hello(hello("valkey", version), WHERE)


@pytest.mark.parametrize(
    "reply",
    [
        None,
        b"OK",
        [],
        [b"server", b"redis"],  # no version: nothing to judge
        [b"server", b"redis", b"version", b"unstable"],
        {"server": "redis", "version": "7.0.15"},  # a client that maps the reply
    ],
    ids=["none", "bytes", "empty", "no-version", "no-number", "mapped"],
)
def test_a_reply_that_cannot_tell_passes(reply: object) -> None:
    check_hello(reply, WHERE)


def test_a_mapped_reply_is_read_like_a_flat_one() -> None:
    with pytest.raises(ServerUnusable):
        check_hello({"server": "redis", "version": "6.0.9"}, WHERE)
    with pytest.raises(ServerUnusable):
        check_hello(["server", "redis", "version", "6.0.9"], WHERE)  # decoded responses


# --- on real servers, with the minimum raised past them ---------------------------------


@pytest.fixture
def raised(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every server here (Redis 7.0) counts as too old: the minimum is 99.0."""
    monkeypatch.setattr(_redis_server, "MIN_REDIS", (99, 0))
    yield


def refused(error: StorageError) -> str:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError)  # it answered: not an outage
    assert "runs Redis 7." in message
    assert "need Redis 99.0 or later" in message
    return message


@pytest.mark.redis
def test_the_blocking_store_refuses_and_writes_nothing(
    raised: None, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    store = RedisStore(redis_server.client(), timeout=1.0)
    try:
        with pytest.raises(StorageError) as hit:
            store.hit("fixed_window", "old", RATE)
        assert f"127.0.0.1:{redis_server.port}" in refused(hit.value)
        with pytest.raises(StorageError) as pinged:
            store.ping()
        refused(pinged.value)
    finally:
        store.close()
    assert redis_client.dbsize() == 0


@pytest.mark.redis
async def test_the_asyncio_store_refuses_and_writes_nothing(
    raised: None, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    store = AsyncRedisStore(aredis.Redis(host="127.0.0.1", port=redis_server.port), timeout=1.0)
    try:
        with pytest.raises(StorageError) as hit:
            await store.hit("fixed_window", "old", RATE)
        refused(hit.value)
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        refused(pinged.value)
    finally:
        await store.aclose()
        await store.client.aclose()
    assert redis_client.dbsize() == 0


@pytest.mark.redis
@pytest.mark.cluster
async def test_a_cluster_is_refused_on_both_stores(
    raised: None, redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    port = redis_cluster.nodes[0].port
    blocking = RedisStore(redis.RedisCluster(host="127.0.0.1", port=port), timeout=1.0)
    try:
        with pytest.raises(StorageError) as hit:
            blocking.hit("fixed_window", "old", RATE)
        refused(hit.value)
    finally:
        blocking.close()
        blocking.client.close()
    awaited = AsyncRedisStore(aredis.RedisCluster(host="127.0.0.1", port=port), timeout=1.0)
    try:
        with pytest.raises(StorageError) as ahit:
            await awaited.hit("fixed_window", "old", RATE)
        refused(ahit.value)
    finally:
        await awaited.aclose()
        await awaited.client.aclose()
    assert cluster_client.dbsize() == 0


async def decides_both_ways(server: RedisServer) -> None:
    """A blocking and an asyncio store on the emptied ``server`` answer pings and decide."""
    blocking = RedisStore(server.client(), timeout=1.0)
    awaited = AsyncRedisStore(aredis.Redis(host="127.0.0.1", port=server.port), timeout=1.0)
    try:
        assert blocking.ping()
        assert blocking.hit("fixed_window", "new", RATE).remaining == 4
        assert await awaited.ping()
        assert (await awaited.hit("fixed_window", "new", RATE)).remaining == 3
    finally:
        blocking.close()
        await awaited.aclose()
        await awaited.client.aclose()


@pytest.mark.redis
async def test_valkey_passes_whatever_the_redis_minimum(
    raised: None, valkey_server: RedisServer, valkey_client: redis.Redis
) -> None:
    await decides_both_ways(valkey_server)


@pytest.mark.redis
async def test_at_the_real_minimum_redis_7_passes_through_the_same_check(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    await decides_both_ways(redis_server)


# --- ratewarden serve ---------------------------------------------------------------------

RULES = """\
domain: old
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 5}
"""


def settings(tmp_path: Path, url: str) -> Settings:
    (tmp_path / "rules.yaml").write_text(RULES)
    return Settings(
        config_paths=(str(tmp_path / "rules.yaml"),),
        store_url=url,
        grpc_port=0,
        http_port=0,
        reload_interval=0,
    )


@pytest.mark.redis
async def test_serve_refuses_to_start_on_a_redis_too_old_and_says_why(
    raised: None, tmp_path: Path, redis_server: RedisServer
) -> None:
    server = RateLimitServer(settings(tmp_path, f"redis://127.0.0.1:{redis_server.port}/0"))
    try:
        with pytest.raises(ConfigurationError) as started:
            await server.start()
    finally:
        await server.close()
    message = str(started.value)
    assert message.startswith("the store cannot be used: ")
    assert "need Redis 99.0 or later" in message
    assert (server.grpc_port, server.http_port) == (0, 0)  # nothing was bound


@pytest.mark.redis
async def test_serve_starts_on_a_store_that_does_not_answer_yet(
    raised: None, tmp_path: Path
) -> None:
    """Not answering is a passing state (NOT_SERVING until it answers), not a refusal."""
    server = RateLimitServer(settings(tmp_path, f"redis://127.0.0.1:{free_port()}/0"))
    try:
        await server.start()
        assert server.grpc_port > 0
        assert not await server.refresh_health()
    finally:
        await server.stop()


@pytest.mark.redis
async def test_a_server_found_too_old_later_makes_serve_not_serving_and_says_why(
    tmp_path: Path,
    redis_server: RedisServer,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failover to an old replica: the next connection is refused, the health loop says so."""
    server = RateLimitServer(settings(tmp_path, f"redis://127.0.0.1:{redis_server.port}/0"))
    try:
        await server.start()
        assert await server.refresh_health()
        monkeypatch.setattr(_redis_server, "MIN_REDIS", (99, 0))
        redis_client.client_kill_filter(_type="normal", skipme=True)  # the store reconnects
        with caplog.at_level("WARNING", logger="ratewarden.server"):
            # The first ping may meet the killed connection (no answer); the next reconnects.
            serving = [await server.refresh_health() for _ in range(3)]
    finally:
        await server.stop()
    assert serving == [False, False, False]
    messages = [record.getMessage() for record in caplog.records]
    # Logged when the reason changes, not only when serving does.
    assert any("need Redis 99.0 or later" in m and m.endswith(": not serving") for m in messages)


@pytest.mark.redis
def test_the_command_line_exits_2_with_one_line_naming_the_server_and_versions(
    raised: None, tmp_path: Path, redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from ratewarden.cli import main

    (tmp_path / "rules.yaml").write_text(RULES)
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    argv = ["serve", "--config", str(tmp_path / "rules.yaml"), "--store", url]
    assert main([*argv, "--grpc-port", "0", "--http-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("ratewarden serve: error: the store cannot be used: 127.0.0.1:")
    assert "runs Redis 7." in err[0] and "need Redis 99.0 or later" in err[0]
