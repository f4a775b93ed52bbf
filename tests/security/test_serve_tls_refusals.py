"""What ``ratewarden serve`` refuses at start about its TLS files and names, before it listens:
a private key protected by a pass phrase (grpcio would ask for it on the terminal, and wait),
and a ``--tls-client-san`` with a wildcard (it would match no client's certificate). Each is a
``ConfigurationError`` naming the flag (exit 2); the real process is run once for each.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from ratewarden.errors import ConfigurationError
from ratewarden.server.settings import resolve
from tests.security.test_serve_tls import RULES, Pki, pki
from tests.server_transport._process import RATEWARDEN

__all__ = ["pki"]  # the module-scoped fixture, shared with test_serve_tls.py

PASSPHRASE = b"correct horse"


def _encrypted(pki: Pki, directory: Path, fmt: serialization.PrivateFormat) -> Path:
    """The server's key written again under ``PASSPHRASE``, in ``fmt``."""
    key = load_pem_private_key(pki.key.read_bytes(), password=None)
    name = "pkcs8" if fmt == serialization.PrivateFormat.PKCS8 else "traditional"
    path = directory / f"{name}.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            fmt,
            serialization.BestAvailableEncryption(PASSPHRASE),
        )
    )
    return path


@pytest.mark.parametrize(
    "fmt", [serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL]
)
def test_an_encrypted_key_is_refused_naming_the_flag(
    pki: Pki, tmp_path: Path, fmt: serialization.PrivateFormat
) -> None:
    """PKCS#8's ENCRYPTED PRIVATE KEY and OpenSSL's Proc-Type: 4,ENCRYPTED alike, when the
    settings are read (GrpcTls.load runs the same check before it loads the key)."""
    key = _encrypted(pki, tmp_path, fmt)
    flags = {"config_paths": ["r.yaml"], "tls_cert": str(pki.cert), "tls_key": str(key)}
    with pytest.raises(ConfigurationError, match=r"--tls-key .* is encrypted.*openssl pkey"):
        resolve(flags, {})


def test_serve_exits_2_at_once_on_an_encrypted_key(pki: Pki, tmp_path: Path) -> None:
    """The real command, stdin a pipe nobody writes and no terminal (a session of its own,
    so that a prompt could not wait on /dev/tty): one line, exit 2, no prompt."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    key = _encrypted(pki, tmp_path, serialization.PrivateFormat.PKCS8)
    args = ["--config", str(rules), "--tls-cert", str(pki.cert), "--tls-key", str(key)]
    done = subprocess.run(
        [*RATEWARDEN, "serve", *args],
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        start_new_session=True,
    )
    assert done.returncode == 2
    assert "pass phrase" not in done.stdout
    assert done.stderr.count("\n") == 1 and "is encrypted" in done.stderr


@pytest.mark.parametrize("name", ["*.internal", "*", "envoy.*.internal"])
def test_a_client_san_with_a_wildcard_is_refused(name: str) -> None:
    """A wildcard belongs in the certificate; the flag names the one host it must name."""
    flags = {"config_paths": ["r.yaml"], "tls_cert": "c", "tls_key": "k", "tls_client_ca": "ca"}
    with pytest.raises(ConfigurationError, match="without a wildcard"):
        resolve({**flags, "tls_client_san": name}, {})
