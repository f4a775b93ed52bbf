"""A certificate outside its validity is refused: at start, and when a renewal brings one.

An expired certificate (a backup restored, a renewal job that copied the wrong files) or one
not valid yet (issued ahead of this host's clock) can only fail every handshake: clients
refuse it. serve refuses to start on it (exit 2, one line naming the setting and the date),
and the renewal watch keeps the last good certificate, logging ``tls_reload_failed``; one
not valid yet is taken once it is, without another change of the files. Certificates come
from throwaway trustme CAs with the dates given; the time is a ManualClock where the test
needs another now than the system's.
"""

from __future__ import annotations

import datetime
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from ratewarden.errors import ConfigurationError
from ratewarden.server.grpc_tls import CertificateWatch, GrpcTls
from ratewarden.server.tls_validity import certificate_validity
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, BackgroundServer, background_server
from tests.security.test_serve_tls_reload import RULES, der, install, served_certificate
from tests.server_transport._process import RATEWARDEN

UTC = datetime.UTC
#: A validity that ended long ago, and one that starts in 2090: neither depends on today.
PAST = (datetime.datetime(2020, 1, 1, tzinfo=UTC), datetime.datetime(2020, 2, 1, tzinfo=UTC))
FUTURE = (datetime.datetime(2090, 1, 1, tzinfo=UTC), datetime.datetime(2091, 1, 1, tzinfo=UTC))


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def leaf(ca: trustme.CA, dates: tuple[datetime.datetime, datetime.datetime]) -> trustme.LeafCert:
    return ca.issue_cert(HOST, not_before=dates[0], not_after=dates[1])


@pytest.fixture
def files(tmp_path: Path, ca: trustme.CA) -> tuple[Path, Path, trustme.LeafCert]:
    """A good certificate and key in place, as the server starts on them."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = ca.issue_cert(HOST)
    install(first, cert, key)
    return cert, key, first


def test_the_validity_is_read_from_the_certificate_served(ca: trustme.CA) -> None:
    """notBefore and notAfter of the first certificate of the file, as Unix seconds: a
    UTCTime (before 2050) and a GeneralizedTime (from 2050) alike, a key before it too."""
    past, future = leaf(ca, PAST), leaf(ca, FUTURE)
    assert certificate_validity(past.cert_chain_pems[0].bytes()) == tuple(
        moment.timestamp() for moment in PAST
    )
    combined = future.private_key_pem.bytes() + b"".join(p.bytes() for p in future.cert_chain_pems)
    assert certificate_validity(combined) == tuple(moment.timestamp() for moment in FUTURE)
    with pytest.raises(ValueError, match="no PEM certificate"):
        certificate_validity(future.private_key_pem.bytes())


def test_an_expired_certificate_is_refused_at_start(tmp_path: Path, ca: trustme.CA) -> None:
    """GrpcTls.load, on the system's clock: the setting, the file and when it expired."""
    cert, key = tmp_path / "old.crt", tmp_path / "old.key"
    install(leaf(ca, PAST), cert, key)
    with pytest.raises(ConfigurationError) as caught:
        GrpcTls.load(str(cert), str(key))
    assert str(caught.value).startswith(f"--tls-cert {str(cert)!r}: the certificate expired at ")
    assert "2020-02-01 00:00:00 UTC" in str(caught.value)


def test_a_certificate_not_valid_yet_is_refused_at_start(tmp_path: Path, ca: trustme.CA) -> None:
    """Its start and this host's now are named: a clock behind is the likely cause."""
    cert, key = tmp_path / "new.crt", tmp_path / "new.key"
    install(leaf(ca, FUTURE), cert, key)
    with pytest.raises(ConfigurationError, match="not valid before 2090-01-01 00:00:00 UTC"):
        GrpcTls.load(str(cert), str(key))
    clock = ManualClock(FUTURE[0].timestamp())
    assert GrpcTls.load(str(cert), str(key), clock=clock).not_after == FUTURE[1].timestamp()


def test_serve_exits_2_on_an_expired_certificate(tmp_path: Path, ca: trustme.CA) -> None:
    """The real command, the files given by RATEWARDEN_* variables: one line naming the
    variable, exit 2, nothing served."""
    rules, cert, key = tmp_path / "rules.yaml", tmp_path / "old.crt", tmp_path / "old.key"
    rules.write_text(RULES)
    install(leaf(ca, PAST), cert, key)
    environ = {"RATEWARDEN_TLS_CERT": str(cert), "RATEWARDEN_TLS_KEY": str(key)}
    done = subprocess.run(
        [*RATEWARDEN, "serve", "--config", str(rules), "--grpc-port", "0", "--http-port", "0"],
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"RATEWARDEN_TLS_CERT {str(cert)!r}: the certificate expired at" in done.stderr


def test_a_renewal_to_an_expired_certificate_keeps_the_last_good_one(
    ca: trustme.CA,
    files: tuple[Path, Path, trustme.LeafCert],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watch grpcio asks before each handshake: no switch, one error line that says
    the certificate expired, and the failure counted once however many handshakes ask."""
    cert, key, _ = files
    watch = CertificateWatch(GrpcTls.load(str(cert), str(key)))
    before = watch.current
    install(leaf(ca, PAST), cert, key)
    with caplog.at_level(logging.ERROR, logger="ratewarden.server.grpc"):
        assert [watch.check() for _ in range(3)] == [None, None, None]
    failed = [r for r in caplog.records if getattr(r, "event", "") == "tls_reload_failed"]
    assert len(failed) == 1 and "the certificate expired at" in failed[0].error
    assert (watch.reloads, watch.failures) == (0, 1)
    assert watch.current is before


def test_a_certificate_not_valid_yet_is_taken_once_it_is(
    ca: trustme.CA, files: tuple[Path, Path, trustme.LeafCert]
) -> None:
    """Refused while this host's clock is before its notBefore; served from the first
    handshake after it, the files unchanged since."""
    cert, key, _ = files
    clock = ManualClock(FUTURE[0].timestamp() - 60)
    watch = CertificateWatch(GrpcTls.load(str(cert), str(key), clock=clock), clock)
    ahead = leaf(ca, FUTURE)
    install(ahead, cert, key)
    assert watch.check() is None
    clock.advance(59)
    assert watch.check() is None
    assert (watch.reloads, watch.failures) == (0, 1)
    clock.advance(1)
    assert watch.check() is not None
    assert watch.current.cert_chain == ahead.cert_chain_pems[0].bytes()
    assert watch.check() is None
    assert (watch.reloads, watch.failures) == (1, 1)


@pytest.fixture
def server(
    tmp_path: Path, files: tuple[Path, Path, trustme.LeafCert]
) -> Iterator[BackgroundServer]:
    cert, key, _ = files
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(tmp_path, RULES, store, tls_cert=str(cert), tls_key=str(key)) as found:
        yield found


def test_a_real_port_keeps_serving_the_good_certificate(
    ca: trustme.CA, files: tuple[Path, Path, trustme.LeafCert], server: BackgroundServer
) -> None:
    """serve's gRPC port after an expired set replaced the files: new handshakes still get
    the last good certificate; a good renewal after it is served."""
    cert, key, first = files
    install(leaf(ca, PAST), cert, key)
    assert served_certificate(server.port, ca) == der(first)
    renewed = ca.issue_cert(HOST)
    install(renewed, cert, key)
    assert served_certificate(server.port, ca) == der(renewed)


def test_a_validity_this_reader_cannot_find_is_not_a_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OpenSSL has taken the chain before its validity is read: a certificate whose dates this
    module's small DER reader cannot find is served unchecked, with a warning, never refused
    for the reader's sake."""
    from ratewarden.server.grpc_tls import _valid_now

    with caplog.at_level(logging.WARNING, logger="ratewarden.server.grpc"):
        assert _valid_now(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END", "--tls-cert 'x'", 0) == (
            None,
            None,
        )
    assert "validity was not checked" in caplog.text
