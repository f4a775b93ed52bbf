"""``--tls-client-san`` (upstream's ``GRPC_CLIENT_TLS_SAN``): under mutual TLS, a call is
answered only when the client certificate names the host.

Certificates come from throwaway trustme CAs; the server is a real grpcio port. The name
matching (``tls_names.names_host``) follows Go's ``VerifyHostname``, which upstream uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.errors import ConfigurationError
from ratewarden.server.grpc import GrpcTls
from ratewarden.server.grpc_san import ClientSanCheck
from ratewarden.server.settings import Settings, resolve
from ratewarden.server.tls_names import names_host
from tests.fuzz._grpc import HOST
from tests.security.test_serve_tls import OK, OVER, Pki, ask, credentials, mtls_port, pki

__all__ = ["pki"]  # the module-scoped fixture, shared with test_serve_tls.py


@pytest.mark.parametrize(
    ("host", "dns", "ips", "named"),
    [
        ("envoy.client", ["envoy.client"], [], True),
        ("Envoy.Client.", ["envoy.CLIENT"], [], True),
        ("envoy.client", ["other.client"], [], False),
        ("a.mesh.local", ["*.mesh.local"], [], True),
        ("mesh.local", ["*.mesh.local"], [], False),
        ("a.b.mesh.local", ["*.mesh.local"], [], False),
        (".mesh.local", ["*.mesh.local"], [], False),
        ("10.0.0.1", [], ["10.0.0.1"], True),
        ("10.0.0.1", ["10.0.0.1"], [], False),
        ("[::1]", [], ["0:0:0:0:0:0:0:1"], True),
        ("::1", [], ["::2"], False),
        ("envoy.client", [], ["10.0.0.1"], False),
    ],
)
def test_a_name_matches_as_gos_verify_hostname(
    host: str, dns: list[str], ips: list[str], named: bool
) -> None:
    """Exact names without case or a trailing dot, a leftmost * for one label, IPs as IPs."""
    assert names_host(host, dns, ips) is named


@pytest.fixture(scope="module")
def names(pki: Pki) -> dict[str, trustme.LeafCert]:
    """Client certificates from the client CA, by what they name."""
    return {name: pki.client_ca.issue_cert(name) for name in ("other.client", "*.mesh.local")}


@pytest.fixture
def envoy_only(pki: Pki, tmp_path: Path) -> Iterator[int]:
    """mTLS whose clients must be envoy.client."""
    yield from mtls_port(pki, tmp_path, tls_client_san="envoy.client")


def health(channel: grpc.Channel) -> int:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(reply.status)


def test_a_certificate_naming_the_host_is_answered_and_another_refused_before_it_runs(
    pki: Pki, names: dict[str, trustme.LeafCert], envoy_only: int
) -> None:
    """other.client (signed by the same CA) gets UNAUTHENTICATED on every service and is
    charged nothing: envoy.client then still has the limit's one request."""
    target = f"{HOST}:{envoy_only}"
    with grpc.secure_channel(target, credentials(pki, names["other.client"])) as channel:
        for call in (ask, health):
            with pytest.raises(grpc.RpcError) as caught:
                call(channel)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "does not name envoy.client" in str(caught.value.details())
    with grpc.secure_channel(target, credentials(pki, pki.client)) as channel:
        assert [ask(channel).overall_code for _ in range(2)] == [OK, OVER]
        assert health(channel) == health_pb2.HealthCheckResponse.SERVING


def test_a_wildcard_certificate_names_one_label(
    pki: Pki, names: dict[str, trustme.LeafCert], tmp_path: Path
) -> None:
    """--tls-client-san a.mesh.local accepts a *.mesh.local certificate."""
    for port in mtls_port(pki, tmp_path, tls_client_san="a.mesh.local"):
        creds = credentials(pki, names["*.mesh.local"])
        with grpc.secure_channel(f"{HOST}:{port}", creds) as channel:
            assert ask(channel).overall_code == OK


def test_the_setting_comes_from_a_flag_its_variable_or_upstreams(pki: Pki) -> None:
    """--tls-client-san, RATEWARDEN_TLS_CLIENT_SAN, or GRPC_CLIENT_TLS_SAN beside upstream's
    TLS variables; GrpcTls carries it and names it."""
    tls = {"tls_cert": "c.pem", "tls_key": "k.pem", "tls_client_ca": "ca.pem"}
    flagged = resolve({"config_paths": ["r.yaml"], **tls, "tls_client_san": " envoy "}, {})
    assert flagged.tls_client_san == "envoy"
    environ = {"RATEWARDEN_CONFIG": "r.yaml", "RATEWARDEN_TLS_CLIENT_SAN": "10.0.0.1"}
    assert resolve(tls, environ).tls_client_san == "10.0.0.1"
    upstream = {
        "RATEWARDEN_CONFIG": "r.yaml",
        "GRPC_SERVER_USE_TLS": "true",
        "GRPC_SERVER_TLS_CERT": "c.pem",
        "GRPC_SERVER_TLS_KEY": "k.pem",
        "GRPC_CLIENT_TLS_CACERT": "ca.pem",
        "GRPC_CLIENT_TLS_SAN": "localhost",
    }
    assert resolve({}, upstream).tls_client_san == "localhost"
    loaded = GrpcTls.load(str(pki.cert), str(pki.key), str(pki.client_ca_file), "envoy")
    assert loaded.client_san == "envoy" and "SAN envoy" in repr(loaded)


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        ({"tls_cert": "c", "tls_key": "k", "tls_client_san": "e"}, {}, "without --tls-client-ca"),
        ({"tls_client_san": "a b"}, {}, "--tls-client-san 'a b': must be the one host"),
        ({"tls_client_san": "envoy:443"}, {}, "--tls-client-san 'envoy:443'"),
        ({}, {"RATEWARDEN_TLS_CLIENT_SAN": "a/b"}, "RATEWARDEN_TLS_CLIENT_SAN 'a/b'"),
        (
            {},
            {
                "GRPC_SERVER_USE_TLS": "true",
                "GRPC_SERVER_TLS_CERT": "c",
                "GRPC_SERVER_TLS_KEY": "k",
                "GRPC_CLIENT_TLS_SAN": "envoy",
            },
            "GRPC_CLIENT_TLS_SAN is set but GRPC_CLIENT_TLS_CACERT is not",
        ),
        ({}, {"GRPC_CLIENT_TLS_SAN": "envoy"}, "GRPC_CLIENT_TLS_SAN is set but GRPC_SERVER_USE"),
    ],
)
def test_a_name_that_cannot_be_checked_is_refused(
    flags: dict[str, str], environ: dict[str, str], message: str
) -> None:
    """Without the client CA (upstream would ignore the name), or not one host: refused."""
    with pytest.raises(ConfigurationError, match=message):
        resolve({"config_paths": ["r.yaml"], **flags}, environ)
    with pytest.raises(ConfigurationError, match="without --tls-client-ca"):
        Settings(config_paths=("r.yaml",), tls_cert="c", tls_key="k", tls_client_san="e")


class _AbortedError(Exception):
    pass


class _Context:
    """What the check reads of a grpc.aio call (a stand-in: this tests the wrapping only)."""

    def __init__(self, dns: list[bytes]) -> None:
        self.dns = dns
        self.aborted: tuple[Any, str] | None = None

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"peer_dns": self.dns}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: Any, details: str) -> None:
        self.aborted = (code, details)
        raise _AbortedError(details)


def test_a_streamed_answer_stays_a_stream_and_is_closed_with_the_call() -> None:
    """An async generator method (the quota stream) is wrapped as one: its messages pass, it
    is closed as soon as the call's stream is, and a wrong name aborts before its first."""
    closed: list[bool] = []

    async def stream(request: Any, context: Any) -> AsyncIterator[int]:
        try:
            for n in range(3):
                yield n
        finally:
            closed.append(True)

    wrapped = ClientSanCheck("envoy.client")._checked(stream)

    async def run() -> tuple[list[int], _Context]:
        good = wrapped(None, _Context([b"envoy.client"]))
        first = [await anext(good), await anext(good)]
        await good.aclose()
        assert closed == [True]
        bad = _Context([b"other.client"])
        with pytest.raises(_AbortedError):
            await anext(wrapped(None, bad))
        return first, bad

    first, bad = asyncio.run(run())
    assert first == [0, 1]
    assert bad.aborted is not None and bad.aborted[0] == grpc.StatusCode.UNAUTHENTICATED
    assert closed == [True]  # the refused call never started the stream
