"""TLS for the gRPC port, and a renewed certificate served without a restart.

``GrpcTls`` holds what ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca`` name, read
and checked at start: unreadable or mismatched files are a ``ConfigurationError`` naming
the flag, before anything listens.

``CertificateWatch`` makes the port's credentials. grpcio asks it, before each new
connection's handshake, whether the certificate has changed (``dynamic_ssl_server_credentials``'s
fetcher): it looks at the three files (``reload.fingerprint``: each file's identity, time and
size, so a Kubernetes secret's swapped ``..data`` link counts) and, when they changed, loads
and checks them as the start does. A good set is served from that handshake on, and logged
(``tls_reloaded``); connections already open keep the certificate they were made with, as in
any TLS server. A set that fails the checks (a key that does not match the certificate,
as when a tool writes the certificate and then the key, or an encrypted key) is logged once
(``tls_reload_failed``, the reason) and the last good one stays. Files that change while
they are read are read again at the next handshake. envoyproxy/ratelimit reloads its
certificate and key when their directory changes; this does the same, and the client CA too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from ratewarden.errors import ConfigurationError
from ratewarden.server.reload import Fingerprint, fingerprint
from ratewarden.server.tls_names import check_tls

__all__ = ["CertificateWatch", "GrpcTls"]

log = logging.getLogger("ratewarden.server.grpc")


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """TLS for the gRPC port: PEM certificate chain and key, and for mTLS the client CA.

    Build it with ``GrpcTls.load`` so that unreadable or mismatched files are a
    ``ConfigurationError`` naming the flag at startup, not a failed bind later; a ``GrpcTls``
    made so also knows its files (``paths``), and its credentials follow them. The key's
    bytes stay out of ``repr``.
    """

    cert_chain: bytes = field(repr=False)
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = field(default=None, repr=False)
    source: str = ""
    #: The host a client certificate must name (``--tls-client-san``), or None.
    client_san: str | None = None
    #: The files read (certificate, key, client CA or None), or () when made from bytes.
    paths: tuple[str, str, str | None] | tuple[()] = ()

    @classmethod
    def load(
        cls, cert: str, key: str, client_ca: str | None = None, client_san: str | None = None
    ) -> GrpcTls:
        """Read and check the files: the key must match the certificate, the CA must parse;
        ``client_san`` needs the CA (no client certificate is asked for without one)."""
        check_tls(cert, key, client_ca, client_san)
        for flag, path in (
            ("--tls-cert", cert),
            ("--tls-key", key),
            ("--tls-client-ca", client_ca),
        ):
            if path is not None:
                _check_readable(flag, path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"--tls-cert {cert!r} / --tls-key {key!r}: cannot use them as a PEM certificate "
                f"chain and its private key ({exc})"
            ) from None
        ca = None
        if client_ca is not None:
            try:
                context.load_verify_locations(cafile=client_ca)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    f"--tls-client-ca {client_ca!r}: cannot use it as PEM CA certificates ({exc})"
                ) from None
            ca = Path(client_ca).read_bytes()
        mode = "mTLS" if ca is not None else "TLS"
        source = f"{mode} ({cert}{', SAN ' + client_san if client_san else ''})"
        chain, private = Path(cert).read_bytes(), Path(key).read_bytes()
        return cls(chain, private, ca, source, client_san, (cert, key, client_ca))

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        """The certificate, key and client CA as grpcio serves them."""
        return grpc.ssl_server_certificate_configuration(
            [(self.private_key, self.cert_chain)], root_certificates=self.client_ca
        )

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials; a client certificate is required when ``client_ca`` is set.
        Made by ``load``, they serve the files' newest good contents (``CertificateWatch``)."""
        if not self.paths:
            return grpc.ssl_server_credentials(
                [(self.private_key, self.cert_chain)],
                root_certificates=self.client_ca,
                require_client_auth=self.client_ca is not None,
            )
        return CertificateWatch(self).credentials()


def _check_readable(flag: str, path: str) -> None:
    """``ConfigurationError`` naming the file ``flag`` gives when it cannot be read: which
    file, and for a permission refused, whose it is and its mode (a Kubernetes secret
    mounted 0600 for root, read by a server that runs as another user)."""
    try:
        with open(path, "rb"):
            return
    except PermissionError as exc:
        why = f"{exc.strerror}: uid {os.geteuid()} may not read it"
        with contextlib.suppress(OSError):
            found = os.stat(path)
            mode = found.st_mode & 0o7777
            why += f"; it is owned by uid {found.st_uid}, gid {found.st_gid}, mode {mode:04o}"
        raise ConfigurationError(f"{flag} {path!r}: cannot read it ({why})") from None
    except OSError as exc:
        raise ConfigurationError(f"{flag} {path!r}: cannot read it ({exc.strerror})") from None


class CertificateWatch:
    """The port's certificate, read again when its files change (see the module).

    ``check()`` is grpcio's fetcher: called before each new connection's handshake, from
    grpc-core's threads, it returns the configuration to switch to, or None to keep the
    current one. It never raises: a failure is logged and the current certificate stays.
    """

    def __init__(self, tls: GrpcTls) -> None:
        if not tls.paths:
            raise ValueError("CertificateWatch needs a GrpcTls made by GrpcTls.load")
        self.current = tls
        self._paths = [path for path in tls.paths if path is not None]
        self._seen: Fingerprint | None = fingerprint(self._paths)
        self._lock = threading.Lock()
        #: Certificates switched to, and sets refused, since the start.
        self.reloads = 0
        self.failures = 0

    def credentials(self) -> grpc.ServerCredentials:
        """grpcio's credentials, asking ``check`` before each handshake."""
        return grpc.dynamic_ssl_server_credentials(
            self.current.configuration(),
            self.check,
            require_client_authentication=self.current.client_ca is not None,
        )

    def check(self) -> grpc.ServerCertificateConfiguration | None:
        """The new configuration when the files changed and load well, else None."""
        try:
            with self._lock:
                return self._check()
        except Exception as exc:  # never into grpc-core: keep serving what we serve
            log.error(
                "checking the TLS files failed; the current certificate stays",
                extra={"event": "tls_reload_failed", "error": repr(exc)},
            )
            return None

    def _check(self) -> grpc.ServerCertificateConfiguration | None:
        now = fingerprint(self._paths)
        if now == self._seen:
            return None
        cert, key, client_ca = self.current.paths or ("", "", None)
        try:
            loaded = GrpcTls.load(cert, key, client_ca, self.current.client_san)
        except ConfigurationError as exc:
            if fingerprint(self._paths) == now:  # not mid-write: say it once, until they change
                self._seen = now
                self.failures += 1
                log.error(
                    "the TLS files changed but cannot be used; the last good certificate stays",
                    extra={"event": "tls_reload_failed", "error": str(exc)},
                )
            return None
        if fingerprint(self._paths) != now:  # written to while read: look again next time
            return None
        self._seen = now
        old = self.current
        if (loaded.cert_chain, loaded.private_key, loaded.client_ca) == (
            old.cert_chain,
            old.private_key,
            old.client_ca,
        ):
            return None  # touched, not changed
        self.current = loaded
        self.reloads += 1
        log.info(
            "TLS certificate reloaded; new connections get it",
            extra={"event": "tls_reloaded", "source": loaded.source, "reloads": self.reloads},
        )
        return loaded.configuration()
