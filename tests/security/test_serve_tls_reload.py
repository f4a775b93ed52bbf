"""A renewed TLS certificate, key or client CA is served without a restart.

serve runs with certificate files on disk; the test replaces them as a renewal does
(cert-manager, a Kubernetes secret, certbot) and opens new connections, reading the
certificate each handshake is made with. A set that cannot be used (a key that does not
match, an encrypted key) is logged once and the last good certificate stays.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.grpc_tls import CertificateWatch, GrpcTls
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, METHOD, BackgroundServer, background_server

RULES = "domain: tls\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 9}\n"
REQUEST = rls_pb2.RateLimitRequest(
    domain="tls",
    descriptors=[
        ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="v")]
        )
    ],
)


def install(leaf: trustme.LeafCert, cert: Path, key: Path) -> None:
    """Put ``leaf``'s certificate and key in place, each by a rename (as tools write them)."""
    for path, pem in ((cert, leaf.cert_chain_pems[0]), (key, leaf.private_key_pem)):
        pem.write_to_path(str(path.with_suffix(".new")))
        os.replace(path.with_suffix(".new"), path)


def served_certificate(
    port: int, ca: trustme.CA, client: trustme.LeafCert | None = None
) -> bytes | None:
    """The DER certificate a new connection's handshake is made with (None: refused)."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.set_alpn_protocols(["h2"])
    if client is not None:
        client.configure_cert(context)
    with socket.create_connection((HOST, port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=HOST) as tls:
                peer = tls.getpeercert(binary_form=True)
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # a client certificate is
                tls.recv(1)  # checked after the handshake in TLS 1.3: wait for a first answer
                return peer
        except (ssl.SSLError, ConnectionError):
            return None


def der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


def ask(port: int, ca: trustme.CA, client: trustme.LeafCert | None = None) -> int:
    """One ShouldRateLimit call on a new channel: its overall code."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=None if client is None else client.private_key_pem.bytes(),
        certificate_chain=None if client is None else client.cert_chain_pems[0].bytes(),
    )
    with grpc.secure_channel(f"{HOST}:{port}", credentials) as channel:
        call = channel.unary_unary(
            METHOD,
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString,
        )
        return int(call(REQUEST, timeout=5).overall_code)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def files(tmp_path: Path, ca: trustme.CA) -> tuple[Path, Path, trustme.LeafCert]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = ca.issue_cert(HOST)
    install(first, cert, key)
    return cert, key, first


@pytest.fixture
def server(
    tmp_path: Path, files: tuple[Path, Path, trustme.LeafCert]
) -> Iterator[BackgroundServer]:
    cert, key, _ = files
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(tmp_path, RULES, store, tls_cert=str(cert), tls_key=str(key)) as found:
        yield found


def test_a_renewed_certificate_is_served_to_new_connections(
    ca: trustme.CA, files: tuple[Path, Path, trustme.LeafCert], server: BackgroundServer
) -> None:
    """Before the renewal the first certificate, after it the second, with no restart;
    calls are answered over both."""
    cert, key, first = files
    assert served_certificate(server.port, ca) == der(first)
    assert ask(server.port, ca) == rls_pb2.RateLimitResponse.OK
    second = ca.issue_cert(HOST)
    install(second, cert, key)
    assert served_certificate(server.port, ca) == der(second)
    assert served_certificate(server.port, ca) == der(second)
    assert ask(server.port, ca) == rls_pb2.RateLimitResponse.OK


def test_a_certificate_whose_key_is_not_there_yet_is_not_served(
    ca: trustme.CA,
    files: tuple[Path, Path, trustme.LeafCert],
    server: BackgroundServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A new certificate with the old key (written one file at a time): the last good
    certificate stays, one error line says why; the key's arrival completes the switch."""
    cert, key, first = files
    second = ca.issue_cert(HOST)
    second.cert_chain_pems[0].write_to_path(str(cert))
    with caplog.at_level(logging.ERROR, logger="ratewarden.server.grpc"):
        for _ in range(3):
            assert served_certificate(server.port, ca) == der(first)
    failed = [r for r in caplog.records if getattr(r, "event", "") == "tls_reload_failed"]
    assert len(failed) == 1
    assert "--tls-key" in failed[0].error
    second.private_key_pem.write_to_path(str(key))
    assert served_certificate(server.port, ca) == der(second)


def test_an_encrypted_key_is_refused_and_the_last_good_one_stays(
    ca: trustme.CA, files: tuple[Path, Path, trustme.LeafCert], server: BackgroundServer
) -> None:
    """A renewal that brings a key under a pass phrase (serve has none to give; grpcio would
    ask for it on the terminal) is refused: the running certificate keeps serving."""
    cert, key, first = files
    second = ca.issue_cert(HOST)
    second.cert_chain_pems[0].write_to_path(str(cert))
    key.write_bytes(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED")
    assert served_certificate(server.port, ca) == der(first)
    assert ask(server.port, ca) == rls_pb2.RateLimitResponse.OK


def test_a_new_client_ca_is_trusted_after_it_replaces_the_old_one(
    tmp_path: Path, ca: trustme.CA, files: tuple[Path, Path, trustme.LeafCert]
) -> None:
    """mTLS: once --tls-client-ca's file holds another CA, clients it signed are answered
    and clients of the old CA are refused at the handshake."""
    cert, key, _ = files
    old_ca, new_ca = trustme.CA(), trustme.CA()
    client_ca = tmp_path / "clients.pem"
    old_ca.cert_pem.write_to_path(str(client_ca))
    old_client, new_client = old_ca.issue_cert("envoy"), new_ca.issue_cert("envoy")
    store = AsyncMemoryStore(clock=ManualClock())
    options = {"tls_cert": str(cert), "tls_key": str(key), "tls_client_ca": str(client_ca)}
    with background_server(tmp_path, RULES, store, **options) as server:
        assert ask(server.port, ca, old_client) == rls_pb2.RateLimitResponse.OK
        with pytest.raises(grpc.RpcError):
            ask(server.port, ca, new_client)
        new_ca.cert_pem.write_to_path(str(client_ca.with_suffix(".new")))
        os.replace(client_ca.with_suffix(".new"), client_ca)
        assert ask(server.port, ca, new_client) == rls_pb2.RateLimitResponse.OK
        with pytest.raises(grpc.RpcError):
            ask(server.port, ca, old_client)


def test_the_watch_switches_only_when_the_files_change(
    ca: trustme.CA, files: tuple[Path, Path, trustme.LeafCert]
) -> None:
    """The fetcher grpcio calls before each handshake: None while nothing changed or the
    files were only touched, a configuration once they hold a new good set."""
    cert, key, _ = files
    watch = CertificateWatch(GrpcTls.load(str(cert), str(key)))
    assert watch.check() is None
    os.utime(cert, ns=(1, 1))  # touched: a new time, the same bytes
    assert watch.check() is None
    assert (watch.reloads, watch.failures) == (0, 0)
    install(ca.issue_cert(HOST), cert, key)
    assert watch.check() is not None
    assert watch.check() is None
    assert watch.reloads == 1
    with pytest.raises(ValueError, match=r"GrpcTls\.load"):
        CertificateWatch(GrpcTls(b"chain", b"key"))
