"""A TLS certificate that does not verify is a setting (or an attack), never an outage.

A server whose certificate the store cannot verify (signed by another CA, or naming another
host) fails every connection the same way until someone changes a setting: waiting never
helps. It used to be a
``StorageUnavailableError``, so ``ratewarden serve`` started and an open failure mode allowed
every request to a server it could not trust (walk storage_ha4, N1). It is now a
``StorageError``, as a refused password is: ``ping`` raises it, ``serve`` refuses to start
(exit 2, one line), and a call that meets it later raises it. The Sentinel side is in
tests/storage/test_sentinel_tls_private_ca.py; the CAs here are made with openssl. A client
certificate the server refuses stays an outage: over TLS 1.3 the server judges it after the
client's handshake ends, and may close the connection before its alert is read
(tests/storage/test_redis_tls_context.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import (
    STORE_TIMEOUT,
    Certificates,
    RedisServer,
    certificate_authority,
    signed_certificate,
)

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")
UNVERIFIED = "presented a TLS certificate the store cannot verify"


@pytest.fixture(scope="module")
def authorities(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certificates, Certificates]:
    """Two throw-away CAs: the servers' and another one."""
    return (
        certificate_authority(tmp_path_factory.mktemp("server-ca")),
        certificate_authority(tmp_path_factory.mktemp("other-ca")),
    )


@pytest.fixture(scope="module")
def tls_servers(
    authorities: tuple[Certificates, Certificates],
) -> Iterator[Callable[[str], RedisServer]]:
    """TLS-only servers by name: "plain" (the CA's certificate for 127.0.0.1), "misnamed"
    (one naming only redis.internal) and "mtls" (client certificates required)."""
    ca, _ = authorities
    misnamed = replace(ca, server_cert=ca.directory / "misnamed.pem")
    misnamed = replace(misnamed, server_key=ca.directory / "misnamed.key")
    signed_certificate(ca, misnamed.server_cert, misnamed.server_key, "DNS:redis.internal")
    servers = {
        "plain": RedisServer(tls=ca),
        "misnamed": RedisServer(tls=misnamed),
        "mtls": RedisServer(["tls-auth-clients yes"], tls=ca),
    }
    yield servers.__getitem__
    for server in servers.values():
        server.stop()


def unusable(error: StorageError) -> str:
    message = str(error)
    assert not isinstance(error, StorageUnavailableError), message
    assert "waiting will not help" in message
    return message


@pytest.mark.parametrize(
    ("server", "ca", "words"),
    [
        ("plain", "other", "self-signed certificate in certificate chain"),
        ("misnamed", "own", "IP address mismatch"),
    ],
    ids=["another-ca", "another-name"],
)
def test_a_server_certificate_that_does_not_verify_is_a_storage_error(
    tls_servers: Callable[[str], RedisServer],
    authorities: tuple[Certificates, Certificates],
    server: str,
    ca: str,
    words: str,
) -> None:
    """Another CA, or a certificate for another name: every hit and ping raise a
    StorageError naming the verification failure and what to check."""
    trusted = authorities[0 if ca == "own" else 1].ca
    url = tls_servers(server).url
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT, ssl_ca_certs=str(trusted))
    try:
        for call in (lambda: store.hit("gcra", "k", RATE), store.ping, store.ping):
            with pytest.raises(StorageError) as caught:
                call()
            message = unusable(caught.value)
            assert UNVERIFIED in message
            assert words in message
            assert "ssl_ca_certs" in message
    finally:
        store.close()


async def test_the_asyncio_store_refuses_a_server_it_cannot_verify(
    tls_servers: Callable[[str], RedisServer], authorities: tuple[Certificates, Certificates]
) -> None:
    """AsyncRedisStore: the same StorageError on a hit and on ping."""
    url = tls_servers("plain").url
    store = AsyncRedisStore.from_url(
        url, timeout=STORE_TIMEOUT, ssl_ca_certs=str(authorities[1].ca)
    )
    try:
        with pytest.raises(StorageError) as caught:
            await store.hit("gcra", "k", RATE)
        assert UNVERIFIED in unusable(caught.value)
        with pytest.raises(StorageError) as pinged:
            await store.ping()
        assert UNVERIFIED in unusable(pinged.value)
    finally:
        await store.aclose()


def test_the_right_ca_and_client_certificate_decide(
    tls_servers: Callable[[str], RedisServer], authorities: tuple[Certificates, Certificates]
) -> None:
    """The control: the servers' own CA, and its client certificate for mutual TLS."""
    own, _ = authorities
    store = RedisStore.from_url(
        tls_servers("mtls").url,
        timeout=STORE_TIMEOUT,
        ssl_ca_certs=str(own.ca),
        ssl_certfile=str(own.client_cert),
        ssl_keyfile=str(own.client_key),
    )
    try:
        assert store.ping() is True
        assert store.hit("gcra", "verified", RATE).allowed
    finally:
        store.close()


def test_serve_exits_2_on_a_server_it_cannot_verify(
    tls_servers: Callable[[str], RedisServer],
    authorities: tuple[Certificates, Certificates],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ratewarden serve --store rediss://...?ssl_ca_certs=OTHER: exit 2 and one line, not a
    service whose open failure mode allows every request."""
    from ratewarden.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "domain: tls\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 2}\n"
    )
    url = f"{tls_servers('plain').url}?ssl_ca_certs={quote(str(authorities[1].ca), safe='')}"
    argv = ["serve", "--config", str(rules), "--store", url, "--grpc-port", "0"]
    assert main([*argv, "--http-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("ratewarden serve: error: the store cannot be used: ")
    assert UNVERIFIED in err[0]
