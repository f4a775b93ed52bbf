"""``rediss+sentinel://`` with a private CA: the TLS options reach the sentinels too.

The sentinels and the data servers speak TLS only, with certificates from a CA made here
(the usual case for an internal Redis). ``ssl_ca_certs`` (and the other ``ssl_*`` options)
used to reach only the primary's connections; discovery went through the sentinels,
verified against the system's CAs only, so no call ever decided and the store looked down
(walk storage_ha4, D1). ``ratewarden serve`` has no keyword arguments: the URL's query
takes the TLS options, and upstream's ``REDIS_TLS_CACERT`` (and the other TLS settings)
now map for ``REDIS_TYPE=sentinel`` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.server.settings import resolve
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import STORE_TIMEOUT, Certificates, RedisSentinel, certificate_authority

pytestmark = pytest.mark.redis

RATE = Rate.parse("5/second")


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A throw-away CA, made with openssl, and the server and client certificates it signed."""
    return certificate_authority(tmp_path_factory.mktemp("sentinel-ca"))


@pytest.fixture(scope="session")
def tls_sentinel(certificates: Certificates) -> Iterator[RedisSentinel]:
    """A primary, a replica and two Sentinels, all speaking TLS only, with the CA's certificates."""
    setup = RedisSentinel(sentinels=2, tls=certificates)
    yield setup
    setup.stop()


def test_the_blocking_store_decides_through_tls_sentinels_with_the_ca_option(
    tls_sentinel: RedisSentinel, certificates: Certificates
) -> None:
    """ssl_ca_certs as a keyword of from_url: the sentinels and the primary are verified
    against it, and the store decides."""
    store = RedisStore.from_url(
        tls_sentinel.url, timeout=STORE_TIMEOUT, ssl_ca_certs=str(certificates.ca)
    )
    try:
        assert store.ping() is True
        assert store.hit("gcra", "tls-sync", RATE).allowed
    finally:
        store.close()


async def test_the_asyncio_store_decides_through_tls_sentinels_with_the_ca_option(
    tls_sentinel: RedisSentinel, certificates: Certificates
) -> None:
    """AsyncRedisStore: the same."""
    store = AsyncRedisStore.from_url(
        tls_sentinel.url, timeout=STORE_TIMEOUT, ssl_ca_certs=str(certificates.ca)
    )
    try:
        assert await store.ping() is True
        assert (await store.hit("gcra", "tls-async", RATE)).allowed
    finally:
        await store.aclose()


def test_the_url_query_carries_the_tls_options(
    tls_sentinel: RedisSentinel, certificates: Certificates
) -> None:
    """What serve can give: ?ssl_ca_certs=... (and ssl_check_hostname=false, read as in a
    rediss:// URL) in a rediss+sentinel:// URL, sync and asyncio."""
    ca = quote(str(certificates.ca), safe="")
    url = f"{tls_sentinel.url}?ssl_ca_certs={ca}&ssl_check_hostname=false"
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        assert store.ping() is True
        pool: Any = store.client.connection_pool
        sentinel = pool.sentinel_manager.sentinels[0]
        assert sentinel.connection_pool.connection_kwargs["ssl_check_hostname"] is False
    finally:
        store.close()


def test_every_tls_option_reaches_the_sentinels_and_the_primary(
    tls_sentinel: RedisSentinel, certificates: Certificates
) -> None:
    """The client certificate, the hostname check and the certificate requirement go to
    the sentinels' connections as to the primary's (checked on the clients, and the store
    decides with them)."""
    given: dict[str, Any] = {
        "ssl_ca_certs": str(certificates.ca),
        "ssl_certfile": str(certificates.client_cert),
        "ssl_keyfile": str(certificates.client_key),
        "ssl_check_hostname": True,
        "ssl_cert_reqs": "required",
    }
    store = RedisStore.from_url(tls_sentinel.url, timeout=STORE_TIMEOUT, **given)
    try:
        pool: Any = store.client.connection_pool
        for sentinel in pool.sentinel_manager.sentinels:
            options = sentinel.connection_pool.connection_kwargs
            assert {name: options[name] for name in given} == given
        assert {name: pool.connection_kwargs[name] for name in given} == given
        assert store.hit("gcra", "mtls", RATE).allowed
    finally:
        store.close()


def test_upstream_tls_settings_map_for_a_sentinel_store(
    tls_sentinel: RedisSentinel, certificates: Certificates
) -> None:
    """REDIS_TYPE=sentinel with REDIS_TLS and REDIS_TLS_CACERT was refused ("takes no TLS
    files"): it now makes a rediss+sentinel:// URL carrying the CA, and that store decides."""
    hosts = tls_sentinel.hosts
    environ = {
        "REDIS_TYPE": "sentinel",
        "REDIS_URL": f"{tls_sentinel.service},{hosts}",
        "REDIS_TLS": "true",
        "REDIS_TLS_CACERT": str(certificates.ca),
    }
    url = resolve({"config_paths": ["rules.yaml"]}, environ).store_url
    ca = quote(str(certificates.ca), safe="")
    assert url == f"rediss+sentinel://{hosts}/{tls_sentinel.service}?ssl_ca_certs={ca}"
    store = RedisStore.from_url(url, timeout=STORE_TIMEOUT)
    try:
        assert store.ping() is True
    finally:
        store.close()


@pytest.mark.parametrize("option", ["ssl_ca_certs=%2Fca.pem", "ssl_check_hostname=false"])
def test_a_tls_option_on_a_sentinel_url_without_tls_is_refused(option: str) -> None:
    """redis+sentinel://...?ssl_ca_certs=: refused, naming the TLS scheme (nothing connects)."""
    with pytest.raises(ConfigurationError, match=r"is a TLS option, and the URL is not TLS; use"):
        RedisStore.from_url(f"redis+sentinel://127.0.0.1:26379/m?{option}")


def test_a_missing_ca_file_in_a_sentinel_url_is_refused_at_from_url(tmp_path: Path) -> None:
    """As for a rediss:// URL: the file is read at from_url, its path named."""
    missing = tmp_path / "no-such-ca.pem"
    url = f"rediss+sentinel://127.0.0.1:26379/m?ssl_ca_certs={quote(str(missing), safe='')}"
    with pytest.raises(ConfigurationError) as refused:
        RedisStore.from_url(url)
    assert f"ssl_ca_certs={str(missing)!r} cannot be read" in str(refused.value)


def test_sentinels_the_store_cannot_verify_are_a_storage_error(tls_sentinel: RedisSentinel) -> None:
    """Without the CA no sentinel's certificate verifies: a StorageError naming the
    verification (a setting, or someone in between), never an outage an open failure mode
    would answer by allowing every request."""
    store = RedisStore.from_url(tls_sentinel.url, timeout=STORE_TIMEOUT)
    try:
        for call in (lambda: store.hit("gcra", "k", RATE), store.ping):
            with pytest.raises(StorageError) as caught:
                call()
            assert not isinstance(caught.value, StorageUnavailableError)
            assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
            assert "a sentinel presented a TLS certificate the store cannot verify" in str(
                caught.value
            )
    finally:
        store.close()


async def test_the_asyncio_store_refuses_sentinels_it_cannot_verify(
    tls_sentinel: RedisSentinel,
) -> None:
    """AsyncRedisStore: the same StorageError."""
    store = AsyncRedisStore.from_url(tls_sentinel.url, timeout=STORE_TIMEOUT)
    try:
        with pytest.raises(StorageError) as caught:
            await store.ping()
        assert not isinstance(caught.value, StorageUnavailableError)
        assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    finally:
        await store.aclose()


@pytest.mark.parametrize("scheme", ["rediss://127.0.0.1:6379/0", "rediss+sentinel://127.0.0.1/m"])
def test_a_client_certificate_without_its_key_is_named_so(
    certificates: Certificates, scheme: str
) -> None:
    """ssl_certfile whose file holds no key, and no ssl_keyfile: said in those words, not
    OpenSSL's "[SSL] PEM lib" (nothing connects)."""
    with pytest.raises(ConfigurationError) as refused:
        RedisStore.from_url(scheme, ssl_certfile=str(certificates.client_cert))
    assert "holds no private key, and no ssl_keyfile is given" in str(refused.value)
    assert "PEM lib" not in str(refused.value)
