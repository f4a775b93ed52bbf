"""docs/envoy.md's ``ratelimit`` cluster over mutual TLS, run as written with a real Envoy.

``ratewarden serve`` with ``--tls-cert``, ``--tls-client-ca`` and ``--tls-client-san``; Envoy
with the page's ``envoy-tls-cluster`` block (only the files and the port replaced): its gRPC
health check must pass over TLS. Without the block's ``alpn_protocols: [h2]`` it fails every
time (grpc-core closes a TLS connection without ALPN ``h2``), which is why the page has it.
Certificates from throwaway trustme CAs in a temporary directory; free loopback ports.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.e2e._envoy import ENVOY, SKIP_REASON, Envoy, start_envoy
from tests.server_transport._process import ServeProcess

pytestmark = pytest.mark.skipif(ENVOY is None, reason=SKIP_REASON)

DOC = Path(__file__).resolve().parents[2] / "docs" / "envoy.md"
HEALTH = "cluster.ratelimit.health_check."
#: The files the page's block names, by what the test writes there.
DOC_FILES = {
    "/etc/envoy/tls/ratewarden-ca.crt": "server_ca",
    "/etc/envoy/tls/envoy.crt": "client_cert",
    "/etc/envoy/tls/envoy.key": "client_key",
}


def doc_cluster() -> str:
    """The page's ``yaml envoy-tls-cluster`` block."""
    text = DOC.read_text()
    blocks = re.findall(r"^```yaml envoy-tls-cluster\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) == 1, "docs/envoy.md should have one ```yaml envoy-tls-cluster block"
    return str(blocks[0])


@dataclass
class Pki:
    directory: Path

    def __post_init__(self) -> None:
        server_ca, client_ca = trustme.CA(), trustme.CA()
        server = server_ca.issue_cert("ratewarden.internal")
        client = client_ca.issue_cert("envoy.internal")
        for name, pem in (
            ("server_ca", server_ca.cert_pem),
            ("server_cert", server.cert_chain_pems[0]),
            ("server_key", server.private_key_pem),
            ("client_ca", client_ca.cert_pem),
            ("client_cert", client.cert_chain_pems[0]),
            ("client_key", client.private_key_pem),
        ):
            pem.write_to_path(str(self.path(name)))

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.pem"


@pytest.fixture(scope="module")
def ratewarden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Pki]]:
    """serve over mutual TLS, its clients' certificates required to name envoy.internal."""
    directory = tmp_path_factory.mktemp("tls-envoy")
    pki = Pki(directory)
    rules = directory / "rules.yaml"
    rules.write_text("domain: edge\ndescriptors: []\n")
    process = ServeProcess(
        rules,
        "--tls-cert",
        str(pki.path("server_cert")),
        "--tls-key",
        str(pki.path("server_key")),
        "--tls-client-ca",
        str(pki.path("client_ca")),
        "--tls-client-san",
        "envoy.internal",
        "--transport",
        "grpcio",
    )
    try:
        process.wait_serving()
        yield process, pki
    finally:
        process.stop()


def envoy_with(cluster: str, grpc_port: int, pki: Pki) -> Envoy:
    """Envoy whose only cluster is ``cluster`` (the page's files and port replaced)."""
    for doc_path, name in DOC_FILES.items():
        assert doc_path in cluster, f"the page's block no longer names {doc_path}"
        cluster = cluster.replace(doc_path, str(pki.path(name)))
    assert "port_value: 8081}" in cluster
    cluster = cluster.replace("port_value: 8081}", f"port_value: {grpc_port}}}")

    def fill(listener: int, admin: int) -> str:
        return (
            f"admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}\n"
            f"static_resources:\n  clusters:\n{cluster}"
        )

    return start_envoy(fill)


def health_checks(envoy: Envoy, until: str, timeout: float = 15.0) -> dict[str, int]:
    """Envoy's health check counters of the cluster once ``until`` is above 0 (or the time
    is up), by short name."""
    deadline = time.monotonic() + timeout
    while True:
        stats = {k.removeprefix(HEALTH): v for k, v in envoy.stats(HEALTH).items()}
        if stats.get(until, 0) > 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.1)


def test_the_health_check_passes_over_mutual_tls(ratewarden: tuple[ServeProcess, Pki]) -> None:
    """The block as written: SERVING over TLS, no failure; the sni being a name of the
    certificate, grpc-core writes no 'No match found for server name' line."""
    process, pki = ratewarden
    envoy = envoy_with(doc_cluster(), process.grpc_port, pki)
    try:
        stats = health_checks(envoy, "success")
    finally:
        envoy.stop()
    assert stats["success"] >= 1, stats
    assert (stats["failure"], stats["network_failure"]) == (0, 0), stats
    assert "No match found for server name" not in process.text()


def test_without_alpn_h2_every_health_check_fails(ratewarden: tuple[ServeProcess, Pki]) -> None:
    """The same block less its alpn_protocols line: network failures, never a success (what
    the page warns of)."""
    process, pki = ratewarden
    cluster, removed = re.subn(r"^\s*alpn_protocols: \[h2\]\n", "", doc_cluster(), flags=re.M)
    assert removed == 1
    envoy = envoy_with(cluster, process.grpc_port, pki)
    try:
        stats = health_checks(envoy, "network_failure")
    finally:
        envoy.stop()
    assert stats["network_failure"] >= 1, stats
    assert stats["success"] == 0, stats
