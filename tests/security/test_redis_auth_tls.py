"""Redis AUTH (password and ACL user) and TLS through ``RedisStore.from_url`` and ``serve``.

The server (``secure_redis``) demands ``requirepass``, has an ACL user limited to
``rw*`` keys and the commands the store's scripts call, and listens for TLS
with a certificate from a throwaway CA. Every failure must be an error the
failure mode understands, never a silent success, and never echo the secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, background_server
from tests.security.conftest import ACL_PASSWORD, ACL_USER, PASSWORD, SecureRedis

#: Per hour: the hits run on Redis TIME, and a minute's end between two of them started a
#: new fixed window (shown with the end forced after the first hit).
RATE = Rate.parse("2/hour")
ALGORITHMS = ["fixed_window", "gcra", "token_bucket", "leaky_bucket", "sliding_window"]


def wait_until(condition: Callable[[], bool], limit: float) -> float:
    """Poll ``condition`` every 10 ms for at most ``limit`` seconds; the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < limit, f"not true within {limit} s"
        time.sleep(0.01)
    return time.monotonic() - started


def admits(store: RedisStore, key: str) -> list[bool]:
    """Three hits on ``key`` at 2/hour: which were allowed."""
    return [store.hit("fixed_window", key, RATE).allowed for _ in range(3)]


def test_a_password_in_the_url_authenticates(secure_redis: SecureRedis) -> None:
    """redis://:PASSWORD@host: decisions are made and counted on the server."""
    store = RedisStore.from_url(f"redis://:{PASSWORD}@{HOST}:{secure_redis.port}/0", timeout=1)
    try:
        assert admits(store, "password") == [True, True, False]
    finally:
        store.close()


def refused_credentials(error: StorageError, port: int, given: str = ":wrong-password@") -> None:
    """The server answered no to the credentials (or said it needs some, when ``given`` is
    none): a StorageError that is not an outage, naming the server, without the password
    tried."""
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    if given:
        assert f"{HOST}:{port} refused the store's credentials" in message
    else:
        assert f"{HOST}:{port} needs a password, and the store is given none" in message
    assert "waiting will not help" in message
    assert "wrong-password" not in message


@pytest.mark.parametrize("credentials", ["", ":wrong-password@"], ids=["none", "wrong"])
def test_missing_or_wrong_credentials_fail_every_call(
    secure_redis: SecureRedis, credentials: str
) -> None:
    """No password (NOAUTH), or a wrong one (WRONGPASS): every hit and ping raises a
    StorageError, not StorageUnavailableError (waiting will not help), never an allow; and
    the message does not carry the password tried."""
    store = RedisStore.from_url(f"redis://{credentials}{HOST}:{secure_redis.port}/0", timeout=1)
    try:
        for _ in range(2):
            with pytest.raises(StorageError) as caught:
                store.hit("fixed_window", "no-entry", RATE)
            refused_credentials(caught.value, secure_redis.port, credentials)
        with pytest.raises(StorageError) as pinged:
            store.ping()
        refused_credentials(pinged.value, secure_redis.port, credentials)
    finally:
        store.close()


@pytest.mark.parametrize("credentials", ["", ":wrong-password@"], ids=["none", "wrong"])
async def test_the_async_store_fails_the_same_on_missing_or_wrong_credentials(
    secure_redis: SecureRedis, credentials: str
) -> None:
    """AsyncRedisStore: the same StorageError on a hit and on ping."""
    url = f"redis://{credentials}{HOST}:{secure_redis.port}/0"
    store = AsyncRedisStore.from_url(url, timeout=1)
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("fixed_window", "no-entry", RATE)
        refused_credentials(caught.value, secure_redis.port, credentials)
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        refused_credentials(pinged.value, secure_redis.port, credentials)
    finally:
        await store.aclose()


def test_serve_with_a_wrong_password_exits_2_with_one_line(
    secure_redis: SecureRedis, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ratewarden serve --store redis://:WRONG@host: exit 2 and one line saying the server
    refused the credentials, not a service whose failure mode allows every request."""
    from ratewarden.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "domain: auth\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 2}\n"
    )
    url = f"redis://:wrong-password@{HOST}:{secure_redis.port}/0"
    argv = ["serve", "--config", str(rules), "--store", url, "--grpc-port", "0"]
    assert main([*argv, "--http-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("ratewarden serve: error: the store cannot be used: ")
    assert "refused the store's credentials" in err[0]
    assert "wrong-password" not in err[0]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_acl_user_with_only_the_store_commands_runs_every_algorithm(
    secure_redis: SecureRedis, algorithm: str
) -> None:
    """redis://limiter:PASSWORD@host, a user allowed ~rw* and the scripts' commands only."""
    url = f"redis://{ACL_USER}:{ACL_PASSWORD}@{HOST}:{secure_redis.port}/0"
    store = RedisStore.from_url(url, timeout=1)
    try:
        rates = [RATE, Rate.parse("5/day")]  # two layers: a window counts one per period
        assert [store.hit(algorithm, f"acl-{algorithm}", rates).allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
        store.reset(algorithm, f"acl-{algorithm}", rates)
        assert store.hit(algorithm, f"acl-{algorithm}", rates).allowed
    finally:
        store.close()


def test_an_acl_user_cannot_write_outside_its_key_pattern(secure_redis: SecureRedis) -> None:
    """The same user with prefix 'other' (outside ~rw*): NOPERM, a StorageError, not an allow."""
    url = f"redis://{ACL_USER}:{ACL_PASSWORD}@{HOST}:{secure_redis.port}/0"
    store = RedisStore.from_url(url, timeout=1, prefix="other")
    try:
        with pytest.raises(StorageError, match="NOPERM"):
            store.hit("fixed_window", "k", RATE)
    finally:
        store.close()


def test_rediss_verifies_the_server_against_the_given_ca(secure_redis: SecureRedis) -> None:
    """rediss:// with the CA (as the ssl_ca_certs option, or in the URL for serve) and AUTH."""
    base = f"rediss://:{PASSWORD}@{HOST}:{secure_redis.tls_port}/0"
    for store in (
        RedisStore.from_url(base, timeout=1, ssl_ca_certs=str(secure_redis.ca)),
        RedisStore.from_url(f"{base}?ssl_ca_certs={secure_redis.ca}", timeout=1),
    ):
        try:
            assert store.hit("fixed_window", "tls", RATE).rate == RATE
        finally:
            store.close()


def test_rediss_refuses_a_server_it_cannot_verify(secure_redis: SecureRedis) -> None:
    """Without the CA the handshake fails: a StorageError naming the verification, not an
    outage (waiting will not fix it, and an open failure mode must not allow everything)."""
    store = RedisStore.from_url(f"rediss://:{PASSWORD}@{HOST}:{secure_redis.tls_port}/0", timeout=1)
    try:
        with pytest.raises(StorageError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            store.hit("fixed_window", "tls", RATE)
        assert not isinstance(caught.value, StorageUnavailableError)
    finally:
        store.close()


def test_plain_redis_on_the_tls_port_fails_instead_of_talking_in_clear(
    secure_redis: SecureRedis,
) -> None:
    """redis:// to the TLS port: the server drops the connection; an error, not a decision."""
    store = RedisStore.from_url(f"redis://:{PASSWORD}@{HOST}:{secure_redis.tls_port}/0", timeout=1)
    try:
        with pytest.raises(StorageUnavailableError):
            store.hit("fixed_window", "clear", RATE)
    finally:
        store.close()


async def test_the_async_store_speaks_tls_as_an_acl_user(secure_redis: SecureRedis) -> None:
    """AsyncRedisStore over rediss:// with the ACL user: the same decisions."""
    url = f"rediss://{ACL_USER}:{ACL_PASSWORD}@{HOST}:{secure_redis.tls_port}/0"
    store = AsyncRedisStore.from_url(
        url, timeout=1, ssl_ca_certs=str(secure_redis.ca), clock=ManualClock()
    )
    try:
        allowed = [(await store.hit("gcra", "async-tls", RATE)).allowed for _ in range(3)]
        assert allowed == [True, True, False]
    finally:
        await store.aclose()


def test_serve_counts_on_redis_over_tls_with_an_acl_user(
    secure_redis: SecureRedis, tmp_path: Path
) -> None:
    """ratewarden serve on rediss://limiter:...@host?ssl_ca_certs=...: the gRPC answers come
    from the counters on the TLS server (third call over the limit).

    The store gets a 1 s timeout so that the three answers come from Redis even
    when this shared machine is slow; the default timeout is the next test.
    """
    url = (
        f"rediss://{ACL_USER}:{ACL_PASSWORD}@{HOST}:{secure_redis.tls_port}/0"
        f"?ssl_ca_certs={secure_redis.ca}"
    )
    # Per hour: a fixed window's key expires at its window's end, and a minute's end between
    # the third call and the look at the keys once emptied the server in CI.
    rules = (
        "domain: tls\ndescriptors:\n- key: k\n  rate_limit: {unit: hour, requests_per_unit: 2}\n"
    )
    request = rls_pb2.RateLimitRequest(
        domain="tls",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="serve")]
            )
        ],
    )
    store = AsyncRedisStore.from_url(url, timeout=1.0)
    with (
        background_server(tmp_path, rules, store, store_url=url, health_interval=0.05) as server,
        grpc.insecure_channel(f"{HOST}:{server.port}") as channel,
    ):
        wait_until(server.server.serving, 5.0)
        call = channel.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString,
        )
        codes = [call(request, timeout=5).overall_code for _ in range(3)]
    ok, over = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
    assert codes == [ok, ok, over]
    keys = secure_redis.server.client().keys("rw:*serve*")
    assert keys, "the counter lives on the TLS server"


def test_serve_on_rediss_with_the_default_timeout_connects_and_stops_promptly(
    secure_redis: SecureRedis, tmp_path: Path
) -> None:
    """With the 20 ms default store timeout, serve on rediss:// becomes healthy and stops in
    well under a second. (Each reconnect used to build a new SSL context, ~70 ms of CPU on the
    event loop: no attempt fit in 20 ms, and the starved loop could not even stop.)"""
    url = (
        f"rediss://{ACL_USER}:{ACL_PASSWORD}@{HOST}:{secure_redis.tls_port}/0"
        f"?ssl_ca_certs={secure_redis.ca}"
    )
    rules = (
        "domain: tls\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 2}\n"
    )
    with background_server(tmp_path, rules, store_url=url, health_interval=0.05) as server:
        waited = wait_until(server.server.serving, 10.0)
        stopping = time.monotonic()
    stopped = time.monotonic() - stopping
    print(
        f"\nrediss:// with the default timeout: serving after {waited:.2f} s, "
        f"stopped in {stopped:.3f} s"
    )
    assert stopped < 2.0
