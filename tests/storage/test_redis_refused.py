"""A Redis that answers "no" to the store's connection is not an outage.

A database number the server does not have (``/16`` on a default server, which has 0 to
15) or a password given to a server without one is refused while a new connection is set
up. Waiting will not help, so every call and ``ping()`` raise ``StorageError`` (not
``StorageUnavailableError``) naming the server and its words, as for a Redis too old to run
the scripts, and ``ratewarden serve`` exits 2 instead of serving every request by its
failure mode. A wrong password on a server that has one: tests/security/test_redis_auth_tls.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import exceptions as rx

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage._redis_errors import raise_storage_error
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import RedisServer

RATE = Rate.parse("5/second")

#: (what the URL gets wrong, its path and credentials, the server's words in the error)
REFUSALS = [
    ("", "/16", "DB index is out of range"),
    (":no-such-password@", "/0", "AUTH <password> called without any password configured"),
]
IDS = ["database-16", "password-without-one"]


def url(server: RedisServer, credentials: str, path: str) -> str:
    return f"redis://{credentials}127.0.0.1:{server.port}{path}"


def refused(error: StorageError, server: RedisServer, words: str) -> None:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message  # it answered
    assert f"127.0.0.1:{server.port} refused" in message
    assert words in message
    assert "waiting will not help" in message
    assert "no-such-password" not in message


@pytest.mark.redis
@pytest.mark.parametrize(("credentials", "path", "words"), REFUSALS, ids=IDS)
def test_the_blocking_store_raises_storage_error_on_every_call_and_ping(
    redis_server: RedisServer, credentials: str, path: str, words: str
) -> None:
    """Each hit and ping is a StorageError naming the server's refusal, never a decision."""
    store = RedisStore.from_url(url(redis_server, credentials, path), timeout=1)
    try:
        for _ in range(2):
            with pytest.raises(StorageError) as hit:
                store.hit("fixed_window", "refused", RATE)
            refused(hit.value, redis_server, words)
        with pytest.raises(StorageError) as pinged:
            store.ping()
        refused(pinged.value, redis_server, words)
    finally:
        store.close()


@pytest.mark.redis
@pytest.mark.parametrize(("credentials", "path", "words"), REFUSALS, ids=IDS)
async def test_the_asyncio_store_raises_storage_error_on_every_call_and_ping(
    redis_server: RedisServer, credentials: str, path: str, words: str
) -> None:
    """The asyncio store's pipelined connection is refused the same way."""
    store = AsyncRedisStore.from_url(url(redis_server, credentials, path), timeout=1)
    try:
        with pytest.raises(StorageError) as hit:
            await store.hit("fixed_window", "refused", RATE)
        refused(hit.value, redis_server, words)
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        refused(pinged.value, redis_server, words)
    finally:
        await store.aclose()


@pytest.mark.redis
@pytest.mark.parametrize(("credentials", "path", "words"), REFUSALS, ids=IDS)
def test_serve_exits_2_with_one_line_naming_the_refusal(
    redis_server: RedisServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    credentials: str,
    path: str,
    words: str,
) -> None:
    """ratewarden serve --store redis://HOST:PORT/16: exit 2 and one line, not a service
    whose failure mode (open by default) allows every request."""
    from ratewarden.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "domain: refused\ndescriptors:\n"
        "  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
    )
    argv = ["serve", "--config", str(rules), "--store", url(redis_server, credentials, path)]
    assert main([*argv, "--grpc-port", "0", "--http-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(
        f"ratewarden serve: error: the store cannot be used: 127.0.0.1:{redis_server.port} refused"
    )
    assert words in err[0]
    assert "no-such-password" not in err[0]


def test_a_refused_password_met_on_redis_py_s_own_connections_is_not_an_outage() -> None:
    """A Cluster's client sets up its connections itself (its slot table): the
    AuthenticationError it raises is a StorageError too."""
    wrong = rx.AuthenticationError("invalid username-password pair or user is disabled.")
    with pytest.raises(StorageError) as raised:
        raise_storage_error(wrong, "127.0.0.1:7000", 1.0)
    assert not isinstance(raised.value, StorageUnavailableError)
    assert "127.0.0.1:7000 refused the store's credentials" in str(raised.value)
