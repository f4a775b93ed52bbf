"""The xDS client's TLS files are checked at start as the gRPC port's are.

A CA file that is not PEM certificates, a client certificate and key that do not load
together, a key protected by a pass phrase, a certificate without its key: each would let
``serve`` start and then fail every connection to the control plane, retried for ever with
grpc-core's own lines. Each is refused before anything starts (exit 2), one line naming the
setting as it was given: ``--xds-tls-*``, ``RATEWARDEN_XDS_TLS_*``, or envoyproxy/ratelimit's
``CONFIG_GRPC_XDS_*``. Real files from a throwaway trustme CA; the settings as ``serve``
resolves and checks them (``settings.resolve``, ``check_start``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from ratewarden.errors import ConfigurationError
from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings, resolve
from ratewarden.server.start_checks import check_start
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport._process import RATEWARDEN

UPSTREAM = {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"}


class Files:
    """A CA, a client certificate and its key, another key, that key encrypted in PKCS#8 and
    in OpenSSL's traditional format, a junk CA file and one with no certificate at all."""

    def __init__(self, directory: Path) -> None:
        ca = trustme.CA()
        client, other = ca.issue_cert("ratelimit-client"), ca.issue_cert("other")
        self.ca, self.cert, self.key, self.other_key = (
            directory / name for name in ("ca.pem", "c.crt", "c.key", "o.key")
        )
        ca.cert_pem.write_to_path(str(self.ca))
        client.cert_chain_pems[0].write_to_path(str(self.cert))
        client.private_key_pem.write_to_path(str(self.key))
        other.private_key_pem.write_to_path(str(self.other_key))
        key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
        locked = serialization.BestAvailableEncryption(b"pass phrase")
        self.pkcs8, self.traditional = directory / "p8.key", directory / "trad.key"
        for path, form in (
            (self.pkcs8, serialization.PrivateFormat.PKCS8),
            (self.traditional, serialization.PrivateFormat.TraditionalOpenSSL),
        ):
            path.write_bytes(key.private_bytes(serialization.Encoding.PEM, form, locked))
        self.junk, self.no_cert = directory / "junk.pem", directory / "none.pem"
        self.junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        self.no_cert.write_text("a CA bundle was meant to be here\n")


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


def start(flags: dict[str, Any], environ: dict[str, str]) -> Settings:
    """What ``serve`` does before it opens a port: resolve the settings, then check them."""
    flags = {"config_xds": "127.0.0.1:1", "xds_tls": True, **flags} if flags else flags
    chosen = resolve(flags, environ)
    check_start(chosen, flags, environ)
    return chosen


def refused(flags: dict[str, Any], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigurationError) as caught:
        start(flags, environ or {})
    return str(caught.value)


@pytest.mark.parametrize("ca", ["junk", "no_cert"])
def test_a_ca_file_that_is_not_pem_certificates_is_refused(files: Files, ca: str) -> None:
    """A truncated or garbled certificate, or a file with none: named by its flag."""
    path = getattr(files, ca)
    message = refused({"xds_tls_ca": str(path)})
    assert message.startswith(f"--xds-tls-ca {str(path)!r}: cannot use it as PEM CA certificates")


def test_a_key_that_does_not_match_the_certificate_is_refused(files: Files) -> None:
    """OpenSSL's own reason (KEY_VALUES_MISMATCH), after both flags and files."""
    message = refused({"xds_tls_cert": str(files.cert), "xds_tls_key": str(files.other_key)})
    pair = f"--xds-tls-cert {str(files.cert)!r} / --xds-tls-key {str(files.other_key)!r}"
    assert message.startswith(f"{pair}: cannot use them as a PEM certificate chain")
    assert "KEY_VALUES_MISMATCH" in message


@pytest.mark.parametrize("key", ["pkcs8", "traditional"])
def test_an_encrypted_key_is_refused_without_asking_for_its_pass_phrase(
    files: Files, key: str
) -> None:
    """Both PEM forms of a key protected by a pass phrase: serve has none to give."""
    path = getattr(files, key)
    message = refused({"xds_tls_cert": str(files.cert), "xds_tls_key": str(path)})
    assert message.startswith(f"--xds-tls-key {str(path)!r} is encrypted")
    assert "openssl pkey" in message


@pytest.mark.parametrize(("given", "missing"), [("cert", "key"), ("key", "cert")])
def test_a_certificate_without_its_key_or_a_key_without_its_certificate_is_refused(
    files: Files, given: str, missing: str
) -> None:
    """Mutual TLS needs both; the one given is named, and the one missing."""
    message = refused({f"xds_tls_{given}": str(getattr(files, given))})
    assert message.startswith(f"--xds-tls-{given} is set but --xds-tls-{missing} is not")


def test_the_settings_are_named_as_given_by_variable(files: Files) -> None:
    """``RATEWARDEN_XDS_TLS_*`` and upstream's ``CONFIG_GRPC_XDS_*`` name the files they gave."""
    own = {"RATEWARDEN_CONFIG_XDS": "127.0.0.1:1", "RATEWARDEN_XDS_TLS": "true"}
    message = refused({}, {**own, "RATEWARDEN_XDS_TLS_CA": str(files.junk)})
    assert message.startswith(f"RATEWARDEN_XDS_TLS_CA {str(files.junk)!r}: cannot use it")
    environ = {
        **UPSTREAM,
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": str(files.cert),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": str(files.traditional),
    }
    message = refused({}, environ)
    assert message.startswith(f"CONFIG_GRPC_XDS_CLIENT_TLS_KEY {str(files.traditional)!r} is ")
    environ["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = str(files.other_key)
    message = refused({}, environ)
    assert message.startswith(f"CONFIG_GRPC_XDS_CLIENT_TLS_CERT {str(files.cert)!r} / ")
    assert f"CONFIG_GRPC_XDS_CLIENT_TLS_KEY {str(files.other_key)!r}: cannot use them" in message


def test_good_files_pass_and_a_combined_pem_serves_as_both(files: Files, tmp_path: Path) -> None:
    """The checks refuse only what cannot work: CA, certificate and key, or one PEM holding
    the key and the certificate given as both."""
    good = {"xds_tls_ca": str(files.ca), "xds_tls_cert": str(files.cert)}
    assert start({**good, "xds_tls_key": str(files.key)}, {}).xds_tls_key == str(files.key)
    both = tmp_path / "both.pem"
    both.write_bytes(files.key.read_bytes() + files.cert.read_bytes())
    start({"xds_tls_cert": str(both), "xds_tls_key": str(both)}, {})


def test_a_server_built_in_process_refuses_them_too(files: Files) -> None:
    """``RateLimitServer`` made from ``Settings`` (no ``serve``): the same check, by flag."""
    settings = Settings(
        config_paths=(), config_xds="127.0.0.1:1", xds_tls=True, xds_tls_ca=str(files.junk)
    )
    with pytest.raises(ConfigurationError, match=r"--xds-tls-ca .*cannot use it as PEM CA"):
        RateLimitServer(settings, store=AsyncMemoryStore(clock=ManualClock()))


def test_serve_exits_2_naming_upstreams_variables(files: Files, tmp_path: Path) -> None:
    """The real command on upstream's variables, a key that is not the certificate's: one
    line naming both variables, exit 2, no port opened and no connection retried."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RATEWARDEN_")},
        **UPSTREAM,
        "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": str(files.cert),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": str(files.other_key),
    }
    done = subprocess.run(
        [*RATEWARDEN, "serve", "--grpc-port", "0", "--http-port", "0"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"ratewarden serve: error: CONFIG_GRPC_XDS_CLIENT_TLS_CERT {str(files.cert)!r} / "
        f"CONFIG_GRPC_XDS_CLIENT_TLS_KEY {str(files.other_key)!r}: cannot use them"
    )
