"""``--tls-client-san`` refuses every call of a client certificate that names another host,
to a method the port does not serve too: UNAUTHENTICATED, counted, as for any other call.

Upstream refuses such a client's handshake, so it learns nothing of the port; here a call to
an unknown method (or to reflection, which is not served) would otherwise say UNIMPLEMENTED,
telling the client what the port serves. A client the name admits still gets UNIMPLEMENTED.
A real grpcio port under mutual TLS, certificates from throwaway trustme CAs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, BackgroundServer, background_server
from tests.security.test_serve_tls import RULES, Pki, credentials, pki

__all__ = ["pki"]  # the module-scoped fixture of test_serve_tls.py

UNKNOWN = ("/nope.Svc/Do", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")


@pytest.fixture
def server(pki: Pki, tmp_path: Path) -> Iterator[BackgroundServer]:
    """mTLS whose clients must be envoy.client (pki.client is)."""
    with background_server(
        tmp_path,
        RULES,
        AsyncMemoryStore(clock=ManualClock()),
        tls_cert=str(pki.cert),
        tls_key=str(pki.key),
        tls_client_ca=str(pki.client_ca_file),
        tls_client_san="envoy.client",
    ) as found:
        yield found


def call_unknown(port: int, pki: Pki, client_name: str | None, method: str) -> grpc.RpcError:
    """One call to ``method`` with a client certificate naming ``client_name`` (None: the
    one naming envoy.client): the error it ends with."""
    client = pki.client if client_name is None else pki.client_ca.issue_cert(client_name)
    with grpc.secure_channel(f"{HOST}:{port}", credentials(pki, client)) as channel:
        call = channel.unary_unary(method)
        with pytest.raises(grpc.RpcError) as caught:
            call(b"", timeout=5)
    return caught.value


def refused(server: BackgroundServer) -> float:
    value = server.server.stats.registry.get_sample_value("ratewarden_client_san_refused_total")
    return value or 0.0


@pytest.mark.parametrize("method", UNKNOWN)
def test_an_unknown_method_is_refused_for_a_certificate_naming_another_host(
    pki: Pki, server: BackgroundServer, method: str
) -> None:
    """other.client: UNAUTHENTICATED, naming the flag, and counted as a refused call."""
    error = call_unknown(server.port, pki, "other.client", method)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "does not name envoy.client (--tls-client-san)" in str(error.details())
    assert refused(server) == 1


@pytest.mark.parametrize("method", UNKNOWN)
def test_an_unknown_method_is_unimplemented_for_the_named_client(
    pki: Pki, server: BackgroundServer, method: str
) -> None:
    """envoy.client: grpcio's own answer to a method nobody serves; nothing refused."""
    error = call_unknown(server.port, pki, None, method)
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert refused(server) == 0
