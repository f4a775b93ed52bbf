"""gRPC TLS and mutual TLS for ``ratewarden serve`` (``--tls-cert/--tls-key/--tls-client-ca``).

Certificates come from throwaway trustme CAs. With TLS a client that trusts the
CA is answered and a plaintext client is refused; with mTLS a client must also
present a certificate the client CA signed. Bad files are a ConfigurationError
naming the flag, before anything listens.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.errors import ConfigurationError
from ratewarden.server.grpc import GrpcTls
from ratewarden.server.settings import Settings, resolve
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, METHOD, background_server

RULES = "domain: tls\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 1}\n"
REQUEST = rls_pb2.RateLimitRequest(
    domain="tls",
    descriptors=[
        ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="v")]
        )
    ],
)
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT


@dataclass(frozen=True)
class Pki:
    """Files on disk: the server's cert/key (signed by ``server_ca``), a client cert/key signed
    by ``client_ca`` (its file ``client_ca_file``), and a client cert/key signed by an
    unrelated CA."""

    server_ca: trustme.CA
    client_ca: trustme.CA
    cert: Path
    key: Path
    client_ca_file: Path
    client: trustme.LeafCert
    stranger: trustme.LeafCert


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    server_ca, client_ca, other_ca = trustme.CA(), trustme.CA(), trustme.CA()
    leaf = server_ca.issue_cert("127.0.0.1", "localhost")
    cert, key, client_ca_file = (
        directory / "server.pem",
        directory / "server.key",
        directory / "clients.pem",
    )
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    client_ca.cert_pem.write_to_path(str(client_ca_file))
    return Pki(
        server_ca,
        client_ca,
        cert,
        key,
        client_ca_file,
        client_ca.issue_cert("envoy.client"),
        other_ca.issue_cert("stranger"),
    )


def credentials(pki: Pki, client: trustme.LeafCert | None = None) -> grpc.ChannelCredentials:
    """Trust the server's CA; present ``client``'s certificate when given."""
    return grpc.ssl_channel_credentials(
        root_certificates=pki.server_ca.cert_pem.bytes(),
        private_key=None if client is None else client.private_key_pem.bytes(),
        certificate_chain=None if client is None else client.cert_chain_pems[0].bytes(),
    )


def ask(channel: grpc.Channel) -> Any:
    call = channel.unary_unary(
        METHOD,
        request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
        response_deserializer=rls_pb2.RateLimitResponse.FromString,
    )
    return call(REQUEST, timeout=5)


@pytest.fixture
def tls_server(pki: Pki, tmp_path: Path) -> Iterator[int]:
    """serve with --tls-cert/--tls-key: the gRPC port."""
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(
        tmp_path, RULES, store, tls_cert=str(pki.cert), tls_key=str(pki.key)
    ) as server:
        yield server.port


def mtls_port(pki: Pki, tmp_path: Path, **options: Any) -> Iterator[int]:
    """serve with --tls-client-ca too (and ``options``): the gRPC port."""
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(
        tmp_path,
        RULES,
        store,
        tls_cert=str(pki.cert),
        tls_key=str(pki.key),
        tls_client_ca=str(pki.client_ca_file),
        **options,
    ) as server:
        yield server.port


@pytest.fixture
def mtls_server(pki: Pki, tmp_path: Path) -> Iterator[int]:
    """serve with --tls-client-ca too: clients need a certificate that CA signed."""
    yield from mtls_port(pki, tmp_path)


def test_a_client_trusting_the_ca_is_answered_over_tls(pki: Pki, tls_server: int) -> None:
    """The rate limit and health services both answer over TLS; the limit holds."""
    with grpc.secure_channel(f"{HOST}:{tls_server}", credentials(pki)) as channel:
        assert [ask(channel).overall_code for _ in range(2)] == [OK, OVER]
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_plaintext_client_is_refused_by_a_tls_port(tls_server: int) -> None:
    """An insecure channel gets no answer: UNAVAILABLE, never a decision."""
    with (
        grpc.insecure_channel(f"{HOST}:{tls_server}") as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        ask(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_that_does_not_trust_the_server_refuses_it(tls_server: int) -> None:
    """A client with another root of trust fails the handshake (UNAVAILABLE)."""
    stranger_root = trustme.CA().cert_pem.bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=stranger_root)
    with (
        grpc.secure_channel(f"{HOST}:{tls_server}", creds) as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        ask(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_answers_a_client_with_a_certificate_from_the_client_ca(
    pki: Pki, mtls_server: int
) -> None:
    """Mutual TLS: the client's certificate is signed by --tls-client-ca: answered."""
    with grpc.secure_channel(f"{HOST}:{mtls_server}", credentials(pki, pki.client)) as channel:
        assert ask(channel).overall_code == OK


@pytest.mark.parametrize("who", ["no certificate", "certificate from another CA"])
def test_mtls_refuses_a_client_without_an_accepted_certificate(
    pki: Pki, mtls_server: int, who: str
) -> None:
    """No client certificate, or one from an unrelated CA: the handshake fails."""
    client = None if who == "no certificate" else pki.stranger
    with (
        grpc.secure_channel(f"{HOST}:{mtls_server}", credentials(pki, client)) as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        ask(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_tls_settings_come_from_flags_or_environment(pki: Pki) -> None:
    """--tls-cert/--tls-key/--tls-client-ca and RATEWARDEN_TLS_* set the same fields."""
    environ = {
        "RATEWARDEN_CONFIG": "rules.yaml",
        "RATEWARDEN_TLS_CERT": str(pki.cert),
        "RATEWARDEN_TLS_KEY": str(pki.key),
    }
    settings = resolve({"tls_client_ca": str(pki.client_ca_file)}, environ)
    assert (settings.tls_cert, settings.tls_key, settings.tls_client_ca) == (
        str(pki.cert),
        str(pki.key),
        str(pki.client_ca_file),
    )
    assert settings.tls


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tls_cert": "c.pem"}, "--tls-cert is set but --tls-key is not"),
        ({"tls_key": "k.pem"}, "--tls-key is set but --tls-cert is not"),
        ({"tls_client_ca": "ca.pem"}, "--tls-client-ca is set without --tls-cert"),
    ],
)
def test_incomplete_tls_settings_are_refused(options: dict[str, str], message: str) -> None:
    """Half a TLS setup is bad input, not a silent plaintext server."""
    with pytest.raises(ConfigurationError, match=message):
        Settings(config_paths=("rules.yaml",), **options)


def test_unusable_tls_files_are_a_configuration_error_naming_the_flag(
    pki: Pki, tmp_path: Path
) -> None:
    """A missing file, a key that is not the certificate's, or a CA file that is not PEM."""
    other = trustme.CA().issue_cert("127.0.0.1")
    wrong_key = tmp_path / "wrong.key"
    other.private_key_pem.write_to_path(str(wrong_key))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigurationError, match="--tls-cert"):
        GrpcTls.load(str(tmp_path / "missing.pem"), str(pki.key))
    with pytest.raises(ConfigurationError, match="--tls-key"):
        GrpcTls.load(str(pki.cert), str(wrong_key))
    with pytest.raises(ConfigurationError, match="--tls-client-ca"):
        GrpcTls.load(str(pki.cert), str(pki.key), str(junk))


def test_the_private_key_stays_out_of_repr(pki: Pki) -> None:
    """repr(GrpcTls) names the mode and file, never the key's bytes."""
    tls = GrpcTls.load(str(pki.cert), str(pki.key), str(pki.client_ca_file))
    assert "PRIVATE KEY" not in repr(tls)
    assert "mTLS" in repr(tls)
