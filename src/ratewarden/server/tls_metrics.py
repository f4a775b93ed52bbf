"""The gRPC port's TLS certificate in serve's metrics: when the one served expires, and its
renewals (``CertificateWatch``'s), so that an alert can see a renewal that never comes or
keeps failing before the certificate in use expires.

- ``ratewarden_tls_certificate_expiry_timestamp_seconds``: the served certificate's
  notAfter (Unix seconds), set at start and at each renewal; with ``--workers N`` the
  soonest of the live workers'. 0 without TLS, or when its validity could not be read.
- ``ratewarden_tls_reloads_total``: certificates switched to since the start.
- ``ratewarden_tls_reload_failures_total``: changed TLS files that could not be used (the
  last good certificate stayed).
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["TlsMetrics"]


class Served(Protocol):
    """What is read of a certificate set (a ``grpc_tls.GrpcTls``): its notAfter, or None."""

    @property
    def not_after(self) -> float | None: ...


class TlsMetrics:
    """The TLS families of one registry; ``served``, ``reloaded`` and ``failed`` are the
    certificate watch's events."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.expiry = Gauge(
            "ratewarden_tls_certificate_expiry_timestamp_seconds",
            "Unix time at which the gRPC port's certificate in use expires (its notAfter).",
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.reloads = Counter(
            "ratewarden_tls_reloads",
            "Renewed TLS certificates the gRPC port switched to.",
            registry=registry,
        )
        self.failures = Counter(
            "ratewarden_tls_reload_failures",
            "Changed TLS files the gRPC port could not use (the last good certificate stayed).",
            registry=registry,
        )

    def served(self, tls: Served) -> None:
        """``tls`` is served (at start)."""
        if tls.not_after is not None:
            self.expiry.set(tls.not_after)

    def reloaded(self, tls: Served) -> None:
        """A renewal switched to ``tls``."""
        self.reloads.inc()
        self.served(tls)

    def failed(self) -> None:
        """Changed files were not used."""
        self.failures.inc()
