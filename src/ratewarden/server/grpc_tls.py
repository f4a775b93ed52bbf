"""TLS for the gRPC port, and a renewed certificate served without a restart.

``GrpcTls`` holds what ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca`` name, read
and checked at start: unreadable or mismatched files, and a certificate outside its
validity (expired, or not valid yet: every handshake would fail on it, as clients refuse
it) are a ``ConfigurationError`` naming the setting as it was given, before anything
listens.

``CertificateWatch`` makes the port's credentials. grpcio asks it, before each new
connection's handshake, whether the certificate has changed (``dynamic_ssl_server_credentials``'s
fetcher): it looks at the three files (``reload.fingerprint``: each file's identity, time and
size, so a Kubernetes secret's swapped ``..data`` link counts) and, when they changed, loads
and checks them as the start does. A good set is served from that handshake on, and logged
(``tls_reloaded``); connections already open keep the certificate they were made with, as in
any TLS server. A set that fails the checks (a key that does not match the certificate,
as when a tool writes the certificate and then the key, an encrypted key, an expired
certificate restored from a backup) is logged once (``tls_reload_failed``, the reason) and
the last good one stays; one not valid yet is tried again once it is. Files that change
while they are read are read again at the next handshake. envoyproxy/ratelimit reloads its
certificate and key when their directory changes; this does the same, and the client CA too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError
from ratewarden.server.reload import Fingerprint, fingerprint
from ratewarden.server.tls_files import check_files
from ratewarden.server.tls_metrics import TlsMetrics
from ratewarden.server.tls_names import TLS_FLAGS, check_tls
from ratewarden.server.tls_validity import certificate_validity, utc

__all__ = ["CertificateWatch", "GrpcTls"]

log = logging.getLogger("ratewarden.server.grpc")


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """TLS for the gRPC port: PEM certificate chain and key, and for mTLS the client CA.

    Build it with ``GrpcTls.load`` so that unreadable or mismatched files, or a certificate
    outside its validity, are a ``ConfigurationError`` naming the setting at startup, not a
    failed bind or failing handshakes later; a ``GrpcTls``
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
    #: The certificate's notBefore and notAfter (Unix seconds), or None when made from bytes.
    not_before: float | None = None
    not_after: float | None = None

    @classmethod
    def load(
        cls,
        cert: str,
        key: str,
        client_ca: str | None = None,
        client_san: str | None = None,
        *,
        names: Mapping[str, str] = TLS_FLAGS,
        clock: Clock | None = None,
    ) -> GrpcTls:
        """Read and check the files: the key must match the certificate, which must be valid
        at ``clock``'s now (the system's by default), and the CA must parse; ``client_san``
        needs the CA (no client certificate is asked for without one). Errors name each
        setting as ``names`` say (``TLS_FLAGS``' keys: its flag, or the variable it came by)."""
        check_tls(cert, key, client_ca, client_san, names)
        given = (names["tls_cert"], names["tls_key"], names["tls_client_ca"])
        check_files(cert, key, client_ca, given)
        ca = None if client_ca is None else Path(client_ca).read_bytes()
        chain, private = Path(cert).read_bytes(), Path(key).read_bytes()
        named = f"{names['tls_cert']} {cert!r}"
        not_before, not_after = _valid_now(chain, named, (clock or SystemClock()).now())
        mode = "mTLS" if ca is not None else "TLS"
        source = f"{mode} ({cert}{', SAN ' + client_san if client_san else ''})"
        paths = (cert, key, client_ca)
        return cls(chain, private, ca, source, client_san, paths, not_before, not_after)

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        """The certificate, key and client CA as grpcio serves them."""
        return grpc.ssl_server_certificate_configuration(
            [(self.private_key, self.cert_chain)], root_certificates=self.client_ca
        )

    def credentials(self, events: TlsMetrics | None = None) -> grpc.ServerCredentials:
        """Server credentials; a client certificate is required when ``client_ca`` is set.
        Made by ``load``, they serve the files' newest good contents (``CertificateWatch``,
        telling ``events`` of each renewal)."""
        if not self.paths:
            return grpc.ssl_server_credentials(
                [(self.private_key, self.cert_chain)],
                root_certificates=self.client_ca,
                require_client_auth=self.client_ca is not None,
            )
        return CertificateWatch(self, events=events).credentials()


def _valid_now(chain: bytes, named: str, now: float) -> tuple[float | None, float | None]:
    """The certificate's validity, or ``ConfigurationError`` when ``now`` is outside it.
    OpenSSL has taken the chain already: one whose validity this module's reader cannot
    find is served unchecked (None, None), with a warning, rather than refused."""
    try:
        not_before, not_after = certificate_validity(chain)
    except ValueError as exc:
        log.warning(
            "%s: its validity was not checked: %s",
            named,
            exc,
            extra={"event": "tls_validity_unread"},
        )
        return None, None
    if now > not_after:
        raise ConfigurationError(
            f"{named}: the certificate expired at {utc(not_after)}; clients refuse it, so "
            "every handshake would fail: give a renewed certificate and its key"
        )
    if now < not_before:
        raise ConfigurationError(
            f"{named}: the certificate is not valid before {utc(not_before)} (now "
            f"{utc(now)}); clients refuse it until then, so every handshake would fail: "
            "check this host's clock, or give a certificate valid now"
        )
    return not_before, not_after


class CertificateWatch:
    """The port's certificate, read again when its files change (see the module).

    ``check()`` is grpcio's fetcher: called before each new connection's handshake, from
    grpc-core's threads, it returns the configuration to switch to, or None to keep the
    current one. It never raises: a failure is logged and the current certificate stays.
    """

    def __init__(
        self, tls: GrpcTls, clock: Clock | None = None, events: TlsMetrics | None = None
    ) -> None:
        if not tls.paths:
            raise ValueError("CertificateWatch needs a GrpcTls made by GrpcTls.load")
        self.current = tls
        self._clock = clock or SystemClock()
        self._paths = [path for path in tls.paths if path is not None]
        self._seen: Fingerprint | None = fingerprint(self._paths)
        #: When a refused certificate that was not valid yet becomes so: its files, unchanged
        #: since, are read again then (a renewal issued a moment ahead of this host's clock).
        self._valid_from: float | None = None
        self._lock = threading.Lock()
        #: Certificates switched to, and sets refused, since the start.
        self.reloads = 0
        self.failures = 0
        #: Told of each switch and each refused set (serve's metrics), when given.
        self._events = events

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
            self.failures += 1
            if self._events is not None:
                self._events.failed()
            log.error(
                "checking the TLS files failed; the current certificate stays",
                extra={"event": "tls_reload_failed", "error": repr(exc)},
            )
            return None

    def _check(self) -> grpc.ServerCertificateConfiguration | None:
        now = fingerprint(self._paths)
        due = self._valid_from is not None and self._clock.now() >= self._valid_from
        if now == self._seen and not due:
            return None
        self._valid_from = None
        cert, key, client_ca = self.current.paths or ("", "", None)
        try:
            loaded = GrpcTls.load(cert, key, client_ca, self.current.client_san, clock=self._clock)
        except ConfigurationError as exc:
            if fingerprint(self._paths) == now:  # not mid-write: say it once, until they change
                self._seen = now
                self._valid_from = _later_valid(cert, self._clock.now())
                self.failures += 1
                if self._events is not None:
                    self._events.failed()
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
        if self._events is not None:
            self._events.reloaded(loaded)
        log.info(
            "TLS certificate reloaded; new connections get it",
            extra={
                "event": "tls_reloaded",
                "source": loaded.source,
                "not_after": None if loaded.not_after is None else utc(loaded.not_after),
                "reloads": self.reloads,
            },
        )
        return loaded.configuration()


def _later_valid(cert: str, now: float) -> float | None:
    """The notBefore of ``cert`` when it is still ahead of ``now``, else None."""
    try:
        not_before, _ = certificate_validity(Path(cert).read_bytes())
    except (OSError, ValueError):
        return None
    return not_before if not_before > now else None
