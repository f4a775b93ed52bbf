"""What ``ratewarden serve`` says when a file or directory it needs at start cannot be used:
which one, and what to set. A start-time OSError keeps its file; a TLS file that cannot be
read is named alone, not as half of the pair; ``--workers`` with no writable temporary
directory names TMPDIR and PROMETHEUS_MULTIPROC_DIR; an IPv6 address is bracketed where
the ``serving`` line gives it."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import trustme

from ratewarden.errors import ConfigurationError
from ratewarden.server import metrics_dir
from ratewarden.server.command import refusal
from ratewarden.server.grpc import GrpcTls
from ratewarden.server.listeners import serving_fields
from ratewarden.server.settings import Settings


def test_an_os_error_at_start_keeps_its_file() -> None:
    """Not a port's line: the file is said, without Python's ``[Errno N]``."""
    exc = FileNotFoundError(errno.ENOENT, "No such file or directory", "/srv/x/rules.db")
    assert refusal(exc, {}) == "No such file or directory: '/srv/x/rules.db'"


def test_a_file_in_the_metrics_directory_names_the_variable() -> None:
    """prometheus_client's file in PROMETHEUS_MULTIPROC_DIR: the variable is named, with
    what to do."""
    exc = FileNotFoundError(errno.ENOENT, "No such file or directory", "/gone/histogram_1.db")
    said = refusal(exc, {"PROMETHEUS_MULTIPROC_DIR": "/gone"})
    assert said.startswith("No such file or directory: '/gone/histogram_1.db' (in ")
    assert "PROMETHEUS_MULTIPROC_DIR '/gone'" in said
    assert "make it a directory this user can write, or unset it" in said


def test_a_port_refusal_is_still_one_line_of_its_own() -> None:
    """The port lines are untouched: a busy port still names its flag."""
    line = "cannot listen for HTTP on 127.0.0.1:8080: the port is in use by another process"
    assert refusal(OSError(errno.EADDRINUSE, line), {}) == (
        f"{line}; give another port with --http-port"
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A server certificate and its key, in files."""
    directory = tmp_path_factory.mktemp("pki")
    leaf = trustme.CA().issue_cert("127.0.0.1")
    cert, key = directory / "server.pem", directory / "server.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def test_a_missing_tls_key_is_named_alone(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """The key that is not there is the one named, with its flag; the certificate is not."""
    cert, _ = pair
    missing = tmp_path / "server.key"
    expected = f"--tls-key '{missing}': cannot read it (No such file or directory)"
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        GrpcTls.load(str(cert), str(missing))


def test_a_tls_client_ca_that_is_a_directory_is_named(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """A path that is a directory (a secret's mount point given instead of its file)."""
    cert, key = pair
    expected = f"--tls-client-ca '{tmp_path}': cannot read it (Is a directory)"
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        GrpcTls.load(str(cert), str(key), str(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of any mode")
def test_an_unreadable_tls_key_says_whose_it_is(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """A key this user may not read (a secret mounted 0600 for another user): the key, this
    uid, and the file's owner and mode."""
    cert, key = pair
    locked = tmp_path / "locked.key"
    shutil.copy(key, locked)
    locked.chmod(0)
    expected = f"--tls-key '{locked}': cannot read it (Permission denied: uid {os.geteuid()}"
    with pytest.raises(ConfigurationError, match=re.escape(expected)) as refused:
        GrpcTls.load(str(cert), str(locked))
    assert "mode 0000" in str(refused.value)


def test_no_writable_temporary_directory_names_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The temporary directory tempfile settled on cannot hold the workers' metrics (a
    path under /proc, which not even root can write): a ConfigurationError naming TMPDIR
    and PROMETHEUS_MULTIPROC_DIR, not Python's own error."""
    monkeypatch.setattr(tempfile, "tempdir", "/proc/ratewarden-none")
    with pytest.raises(ConfigurationError) as refused:
        metrics_dir.make()
    said = str(refused.value)
    assert said.startswith("--workers: no writable temporary directory for the workers' ")
    assert "set TMPDIR to a directory this user can write" in said
    assert "or PROMETHEUS_MULTIPROC_DIR to one made for them" in said


def test_a_tmpdir_passed_over_is_logged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """TMPDIR names a directory no one can write (/proc): tempfile goes on to the next
    candidate (TMP here) without a word, and ``make`` says so."""
    monkeypatch.setenv("TMPDIR", "/proc")
    monkeypatch.setenv("TMP", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
        made = Path(metrics_dir.make())
    assert made.parent == tmp_path
    [said] = [r for r in caplog.records if getattr(r, "event", None) == "tmpdir_not_used"]
    assert (getattr(said, "tmpdir", None), getattr(said, "metrics_dir", None)) == (
        "/proc",
        str(made),
    )


def test_the_serving_line_brackets_ipv6_addresses() -> None:
    """``--host ::1``: every address of the ``serving`` line is as curl takes it."""
    settings = Settings(config_paths=("rules.yaml",), host="::1", debug_port=9, metrics_port=10)

    async def fields() -> dict[str, object]:
        return serving_fields(settings, "grpcio", (8081, 8080, 9, 10))

    line = asyncio.run(fields())
    assert (line["grpc"], line["http"], line["debug"], line["metrics"]) == (
        "[::1]:8081",
        "[::1]:8080",
        "[::1]:9",
        "[::1]:10",
    )
