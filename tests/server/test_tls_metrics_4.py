"""The gRPC port's certificate in serve's metrics: when the one served expires, and how its
renewals went, so that an alert sees a renewal that never comes or keeps failing.

Before, operations.md said to alert on the certificate's expiry and nothing exported it: the
watch counted its reloads and failures for nobody. serve runs with certificate files from a
throwaway trustme CA; a renewal is a new connection after the files changed.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, BackgroundServer, background_server
from tests.security.test_serve_tls_reload import RULES, der, install, served_certificate

UTC = datetime.UTC
FIRST_END = datetime.datetime(2090, 1, 1, tzinfo=UTC)
RENEWED_END = datetime.datetime(2091, 6, 1, tzinfo=UTC)
START = datetime.datetime(2020, 1, 1, tzinfo=UTC)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def served(tmp_path: Path, ca: trustme.CA) -> Iterator[tuple[BackgroundServer, Path, Path]]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    install(ca.issue_cert(HOST, not_before=START, not_after=FIRST_END), cert, key)
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(tmp_path, RULES, store, tls_cert=str(cert), tls_key=str(key)) as found:
        yield found, cert, key


def _sample(server: BackgroundServer, name: str) -> float | None:
    value = server.server.stats.registry.get_sample_value(name)
    return None if value is None else float(value)


def test_the_served_certificates_expiry_and_its_renewals_are_metrics(
    ca: trustme.CA, served: tuple[BackgroundServer, Path, Path]
) -> None:
    server, cert, key = served
    expiry = "ratewarden_tls_certificate_expiry_timestamp_seconds"
    assert _sample(server, expiry) == FIRST_END.timestamp()
    assert _sample(server, "ratewarden_tls_reloads_total") == 0
    assert _sample(server, "ratewarden_tls_reload_failures_total") == 0

    renewed = ca.issue_cert(HOST, not_before=START, not_after=RENEWED_END)
    install(renewed, cert, key)
    assert served_certificate(server.port, ca) == der(renewed)
    assert _sample(server, expiry) == RENEWED_END.timestamp()
    assert _sample(server, "ratewarden_tls_reloads_total") == 1

    # An expired set is refused: the renewed certificate stays, and so does its expiry.
    past = datetime.datetime(2021, 1, 1, tzinfo=UTC)
    install(ca.issue_cert(HOST, not_before=START, not_after=past), cert, key)
    assert served_certificate(server.port, ca) == der(renewed)
    assert _sample(server, "ratewarden_tls_reload_failures_total") == 1
    assert _sample(server, expiry) == RENEWED_END.timestamp()


def test_without_tls_the_expiry_is_0(tmp_path: Path) -> None:
    """0, as an alert's ``> 0`` leaves out: a plaintext port has no certificate to renew."""
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(tmp_path, RULES, store) as server:
        assert _sample(server, "ratewarden_tls_certificate_expiry_timestamp_seconds") == 0
