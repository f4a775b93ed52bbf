"""Where the rules come from and how to ask for them: ``XdsSource``, built from ``serve``'s
settings (``--config-xds`` and the ``--xds-*`` options) by ``source_of``, its TLS files
checked as the gRPC port's are and read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ratewarden.server.settings import Settings
from ratewarden.server.tls_files import check_files

__all__ = ["XDS_TLS_FLAGS", "XdsSource", "XdsTls", "source_of"]

#: The xDS client's TLS files by ``Settings`` field name, as ``source_of`` names them by default.
XDS_TLS_FLAGS = {
    "xds_tls_ca": "--xds-tls-ca",
    "xds_tls_cert": "--xds-tls-cert",
    "xds_tls_key": "--xds-tls-key",
}


@dataclass(frozen=True, slots=True)
class XdsTls:
    """TLS to the xDS server: the CA that signed its certificate (None: the system's), the
    client certificate and key for mutual TLS, and the name its certificate must carry."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = field(default=None, repr=False)  # a secret: never in a log line
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class XdsSource:
    """Where the rules come from and how to ask: ``serve``'s ``--config-xds`` and ``--xds-*``."""

    address: str
    node_id: str = "default"
    node_metadata: tuple[tuple[str, str], ...] = ()
    # May carry a token (authorization): out of the repr.
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    retry_interval: float = 3.0
    retry_max: float = 60.0
    tls: XdsTls | None = None
    max_message_bytes: int = 0


def source_of(settings: Settings, names: Mapping[str, str] = XDS_TLS_FLAGS) -> XdsSource:
    """The xDS server ``settings`` name and how to ask it; its TLS files read now.

    Raises ``ConfigurationError`` for TLS files the client could not use, checked as the
    gRPC port's are (``tls_files.check_files``: unreadable, an encrypted key, a certificate
    and key that do not load together, a CA file that is not PEM certificates), naming each
    setting as ``names`` say (``XDS_TLS_FLAGS``' keys: its flag, or the variable it came
    by). grpc-core would take such files and fail every connection, retried for ever.
    """
    assert settings.config_xds is not None
    tls = None
    if settings.xds_tls:
        ca, cert, key = (getattr(settings, name) for name in XDS_TLS_FLAGS)
        check_files(
            cert, key, ca, (names["xds_tls_cert"], names["xds_tls_key"], names["xds_tls_ca"])
        )
        tls = XdsTls(
            ca=_read(ca),
            cert=_read(cert),
            key=_read(key),
            server_name=settings.xds_tls_server_name,
        )
    return XdsSource(
        address=settings.config_xds,
        node_id=settings.xds_node_id,
        node_metadata=settings.xds_node_metadata,
        headers=settings.xds_headers,
        retry_interval=settings.xds_retry_interval,
        retry_max=settings.xds_retry_max,
        tls=tls,
        max_message_bytes=settings.xds_max_message_bytes,
    )


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()
