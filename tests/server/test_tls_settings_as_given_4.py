"""The TLS settings of ``ratewarden serve`` named as they were given, and given several ways.

A TLS file that cannot be served is refused at start naming its flag, its ``RATEWARDEN_*``
variable or envoyproxy/ratelimit's ``GRPC_*`` variable, whichever gave it, and so is
``--transport native`` with TLS. ``GRPC_SERVER_USE_TLS=true`` is content with files given
by flags or ``RATEWARDEN_*`` variables, which win over upstream's (docs/envoy.md). The
``serving`` line says whether TLS is on. Real files from a throwaway trustme CA; the
settings as ``serve`` resolves and checks them (``settings.resolve``, ``check_start``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import trustme

from ratewarden.errors import ConfigurationError
from ratewarden.server import settings as settings_module
from ratewarden.server.listeners import serving_fields
from ratewarden.server.settings import Settings, resolve
from ratewarden.server.start_checks import check_start


class Files:
    """A rules file, a good certificate and key, another key, a junk CA file, a CA."""

    def __init__(self, directory: Path) -> None:
        ca = trustme.CA()
        leaf, other = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
        self.rules, self.cert, self.key = (directory / n for n in ("r.yaml", "s.crt", "s.key"))
        self.other_key, self.junk, self.ca = (directory / n for n in ("o.key", "j.pem", "ca.pem"))
        self.rules.write_text("domain: d\ndescriptors: []\n")
        leaf.cert_chain_pems[0].write_to_path(str(self.cert))
        leaf.private_key_pem.write_to_path(str(self.key))
        other.private_key_pem.write_to_path(str(self.other_key))
        self.junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        ca.cert_pem.write_to_path(str(self.ca))


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


def start(flags: dict[str, Any], environ: dict[str, str]) -> Settings:
    """What ``serve`` does before it listens: resolve the settings, then check them."""
    chosen = resolve(flags, environ)
    check_start(chosen, flags, environ)
    return chosen


def upstream(**files: Path) -> dict[str, str]:
    return {"GRPC_SERVER_USE_TLS": "true", **{name: str(path) for name, path in files.items()}}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            lambda f: (
                {},
                {"RATEWARDEN_TLS_CERT": "missing.crt", "RATEWARDEN_TLS_KEY": str(f.key)},
            ),
            "RATEWARDEN_TLS_CERT 'missing.crt': cannot read it",
        ),
        (
            lambda f: ({}, upstream(GRPC_SERVER_TLS_CERT=f.cert, GRPC_SERVER_TLS_KEY=f.other_key)),
            "GRPC_SERVER_TLS_CERT '.*s.crt' / GRPC_SERVER_TLS_KEY '.*o.key': cannot use them",
        ),
        (
            lambda f: (
                {},
                upstream(
                    GRPC_SERVER_TLS_CERT=f.cert,
                    GRPC_SERVER_TLS_KEY=f.key,
                    GRPC_CLIENT_TLS_CACERT=f.junk,
                ),
            ),
            "GRPC_CLIENT_TLS_CACERT '.*j.pem': cannot use it as PEM CA",
        ),
        (
            lambda f: ({"tls_cert": str(f.cert), "tls_key": str(f.other_key)}, {}),
            "--tls-cert '.*s.crt' / --tls-key '.*o.key': cannot use them",
        ),
        (
            lambda f: (
                {"tls_cert": str(f.cert)},
                {"RATEWARDEN_TLS_KEY": str(f.other_key)},
            ),
            "--tls-cert '.*s.crt' / RATEWARDEN_TLS_KEY '.*o.key': cannot use them",
        ),
    ],
    ids=["own-variable", "upstream-pair", "upstream-ca", "flags", "flag-and-variable"],
)
def test_a_tls_file_that_cannot_be_served_is_named_as_given(
    files: Files, given: Any, message: str
) -> None:
    """Each file by the name it came by; the refusal before anything listens."""
    flags, environ = given(files)
    with pytest.raises(ConfigurationError, match=message):
        start({"config_paths": [str(files.rules)], **flags}, environ)


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        (
            {},
            {"RATEWARDEN_TRANSPORT": "native", **upstream(GRPC_SERVER_TLS_CERT=Path("c"))},
            r"RATEWARDEN_TRANSPORT native cannot serve TLS \(GRPC_SERVER_TLS_CERT\)",
        ),
        (
            {"transport": "native"},
            {"RATEWARDEN_TLS_CERT": "c", "RATEWARDEN_TLS_KEY": "k"},
            r"--transport native cannot serve TLS \(RATEWARDEN_TLS_CERT\)",
        ),
        (
            {"transport": "native", "tls_cert": "c", "tls_key": "k"},
            {"RATEWARDEN_TRANSPORT": "grpcio"},
            r"--transport native cannot serve TLS \(--tls-cert\)",
        ),
    ],
)
def test_native_transport_with_tls_is_refused_naming_both_as_given(
    flags: dict[str, str],
    environ: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--transport or RATEWARDEN_TRANSPORT, and the certificate's flag or variable (the
    native transport is taken as installed: the check is the same either way)."""
    monkeypatch.setattr(settings_module, "native_installed", lambda: True)
    if "GRPC_SERVER_TLS_CERT" in environ:
        environ = {**environ, "GRPC_SERVER_TLS_KEY": "k"}
    with pytest.raises(ConfigurationError, match=message):
        resolve({"config_paths": ["r.yaml"], **flags}, environ)


def test_use_tls_is_content_with_files_given_by_flags_or_own_variables(files: Files) -> None:
    """GRPC_SERVER_USE_TLS=true with the files from --tls-*, RATEWARDEN_TLS_*, or one of
    each way: TLS on, with the files that win."""
    rules = {"config_paths": [str(files.rules)]}
    flagged = start({**rules, "tls_cert": str(files.cert), "tls_key": str(files.key)}, upstream())
    assert (flagged.tls_cert, flagged.tls_key) == (str(files.cert), str(files.key))
    own = {"RATEWARDEN_TLS_CERT": str(files.cert), "RATEWARDEN_TLS_KEY": str(files.key)}
    assert start(rules, {**upstream(), **own}).tls_key == str(files.key)
    mixed = start({**rules, "tls_key": str(files.key)}, upstream(GRPC_SERVER_TLS_CERT=files.cert))
    assert (mixed.tls_cert, mixed.tls_key) == (str(files.cert), str(files.key))
    beaten = upstream(GRPC_SERVER_TLS_CERT=files.cert, GRPC_SERVER_TLS_KEY=files.other_key)
    winner = start({**rules, "tls_key": str(files.key)}, beaten)
    assert winner.tls_key == str(files.key)


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        ({}, upstream(), "GRPC_SERVER_USE_TLS is true but GRPC_SERVER_TLS_CERT is not set"),
        (
            {"tls_cert": "c"},
            upstream(),
            r"GRPC_SERVER_TLS_KEY is not set \(nor --tls-key or its variable\)",
        ),
        (
            {"tls_client_san": "envoy"},
            upstream(GRPC_SERVER_TLS_CERT=Path("c"), GRPC_SERVER_TLS_KEY=Path("k")),
            "--tls-client-san is set without --tls-client-ca",
        ),
    ],
)
def test_use_tls_still_needs_a_certificate_and_key_from_somewhere(
    flags: dict[str, str], environ: dict[str, str], message: str
) -> None:
    """Given by no flag and no variable, the file is missing, and said so."""
    with pytest.raises(ConfigurationError, match=message):
        resolve({"config_paths": ["r.yaml"], **flags}, environ)


@pytest.mark.parametrize(
    ("tls", "shown"),
    [
        ({}, None),
        ({"tls_cert": "c", "tls_key": "k"}, "TLS"),
        ({"tls_cert": "c", "tls_key": "k", "tls_client_ca": "ca"}, "mTLS"),
    ],
)
def test_the_serving_line_says_whether_tls_is_on(tls: dict[str, str], shown: str | None) -> None:
    """``tls``: None (plaintext), ``TLS``, or ``mTLS`` (client certificates required)."""
    settings = Settings(config_paths=("rules.yaml",), transport="grpcio", **tls)

    async def fields() -> dict[str, object]:
        return serving_fields(settings, "grpcio", (8081, 8080, 0, 0))

    assert asyncio.run(fields())["tls"] == shown
