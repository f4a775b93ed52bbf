"""A call ``--tls-client-san`` refuses is counted on serve's ``/metrics``, not only logged:
``ratewarden_client_san_refused_total``, 0 from the start.

A real server on loopback with mutual TLS (throwaway trustme CAs, ``test_serve_tls``'s).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest

from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, background_server
from tests.security.test_serve_tls import OK, RULES, Pki, ask, credentials, pki
from tests.server_transport.test_metrics import get, parse

__all__ = ["pki"]  # the module-scoped fixture, shared with test_serve_tls.py

REFUSED = "ratewarden_client_san_refused_total"


def scrape(port: int) -> float:
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5) as reply:
        return get(parse(reply.read().decode()), REFUSED)


def test_refused_calls_are_counted(pki: Pki, tmp_path: Path) -> None:
    """4 calls with a certificate naming other.client: 4 UNAUTHENTICATED, the counter 0 -> 4;
    the named client's call is answered and not counted."""
    store = AsyncMemoryStore(clock=ManualClock())
    options = {"tls_cert": str(pki.cert), "tls_key": str(pki.key)}
    options |= {"tls_client_ca": str(pki.client_ca_file), "tls_client_san": "envoy.client"}
    with background_server(tmp_path, RULES, store, **options) as server:
        http_port = server.server.http_port
        assert scrape(http_port) == 0
        target = f"{HOST}:{server.port}"
        other = pki.client_ca.issue_cert("other.client")
        with grpc.secure_channel(target, credentials(pki, other)) as channel:
            for _ in range(4):
                with pytest.raises(grpc.RpcError) as caught:
                    ask(channel)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with grpc.secure_channel(target, credentials(pki, pki.client)) as channel:
            assert ask(channel).overall_code == OK
        assert scrape(http_port) == 4
