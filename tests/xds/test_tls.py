"""Rules from a control plane reached over mutual TLS (certificates made by trustme)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from ratewarden.server.app import RateLimitServer
from tests.xds._control_plane import ControlPlane, until
from tests.xds.conftest import limit, resource, xds_server

NAME = "xds.internal"  # the server certificate's name: not the address connected to


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for ``NAME``, and a client certificate, as PEM files."""
    ca = trustme.CA()
    server = ca.issue_cert(NAME)
    client = ca.issue_cert("ratelimit-client")
    files = {
        "ca": tmp_path / "ca.pem",
        "server_cert": tmp_path / "server.pem",
        "server_key": tmp_path / "server.key",
        "client_cert": tmp_path / "client.pem",
        "client_key": tmp_path / "client.key",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.private_key_pem.write_to_path(str(files["server_key"]))
    files["server_cert"].write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))
    client.private_key_pem.write_to_path(str(files["client_key"]))
    files["client_cert"].write_bytes(b"".join(pem.bytes() for pem in client.cert_chain_pems))
    return files


def _credentials(pki: dict[str, Path]) -> grpc.ServerCredentials:
    """Server TLS that requires a client certificate signed by the CA."""
    return grpc.ssl_server_credentials(
        [(pki["server_key"].read_bytes(), pki["server_cert"].read_bytes())],
        root_certificates=pki["ca"].read_bytes(),
        require_client_auth=True,
    )


def _tls_server(plane: ControlPlane, pki: dict[str, Path], **options: Any) -> RateLimitServer:
    """A server taking rules from ``plane`` over TLS with the client certificate of ``pki``."""
    tls = {
        "xds_tls": True,
        "xds_tls_ca": str(pki["ca"]),
        "xds_tls_cert": str(pki["client_cert"]),
        "xds_tls_key": str(pki["client_key"]),
        "xds_tls_server_name": NAME,
    }
    return xds_server(plane, **{**tls, **options})


async def test_mutual_tls_with_the_servers_name_takes_the_rules(pki: dict[str, Path]) -> None:
    """CA, client certificate and key, and the name the server's certificate carries (upstream's
    CONFIG_GRPC_XDS_SERVER_TLS_SAN): the rules arrive and are ACKed."""
    plane = await ControlPlane.started(credentials=_credentials(pki))
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = _tls_server(plane, pki)
    try:
        await asyncio.wait_for(server.start(), 10)
        assert (await plane.answer(plane.sent[0])).is_ack
    finally:
        await server.stop(0)
        await plane.stop()


@pytest.mark.parametrize(
    "wrong",
    [
        {"xds_tls_server_name": None},  # the certificate is for NAME, not 127.0.0.1
        {"xds_tls_cert": None, "xds_tls_key": None},  # the server requires a client certificate
    ],
    ids=["server-name", "client-certificate"],
)
async def test_a_failed_handshake_gets_no_rules_and_is_retried(
    pki: dict[str, Path], wrong: dict[str, object]
) -> None:
    """A handshake that fails is a failed connection: retried with backoff, no rule taken."""
    plane = await ControlPlane.started(credentials=_credentials(pki))
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = _tls_server(plane, pki, **wrong)
    starting = asyncio.ensure_future(server.start())
    try:
        await until(lambda: server.xds is not None and server.xds.failures >= 3, "retries")
        assert not starting.done() and plane.received == []
    finally:
        starting.cancel()
        await server.stop(0)
        await plane.stop()
