"""Where the rules come from and how to ask for them: ``XdsSource``, built from ``serve``'s
settings (``--config-xds`` and the ``--xds-*`` options) by ``source_of``, its TLS files read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ratewarden.errors import ConfigurationError
from ratewarden.server.settings import Settings

__all__ = ["XdsSource", "XdsTls", "source_of"]


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


def source_of(settings: Settings) -> XdsSource:
    """The xDS server ``settings`` name and how to ask it; its TLS files read now.

    Raises ``ConfigurationError`` naming the option of a file that cannot be read.
    """
    assert settings.config_xds is not None
    tls = None
    if settings.xds_tls:
        files = {}
        for name in ("xds_tls_ca", "xds_tls_cert", "xds_tls_key"):
            path = getattr(settings, name)
            try:
                files[name] = None if path is None else Path(path).read_bytes()
            except OSError as exc:
                flag = "--" + name.replace("_", "-")
                raise ConfigurationError(
                    f"{flag} {path!r}: cannot read it: {exc.strerror or exc}"
                ) from None
        tls = XdsTls(
            ca=files["xds_tls_ca"],
            cert=files["xds_tls_cert"],
            key=files["xds_tls_key"],
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
