"""``ratewarden serve``'s stderr stays JSON lines when TLS handshakes fail.

grpc-core logs every failed handshake (no client certificate, an unknown CA, plaintext on
the TLS port) in its own format at its default verbosity; serve keeps it to its errors
(``GRPC_VERBOSITY=ERROR``) unless the operator set a verbosity or a trace. A real serve
process, real handshakes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from ratewarden.server.logs import GRPC_VERBOSITY, quiet_grpc_core
from tests.security.test_serve_tls import RULES, Pki, ask, credentials, pki
from tests.server_transport._process import ServeProcess, serving

__all__ = ["pki"]  # the module-scoped fixture, shared with test_serve_tls.py


def _refused_handshakes(pki: Pki, target: str) -> None:
    """Three failed handshakes: no client certificate, a stranger's, plaintext."""
    for creds in (credentials(pki), credentials(pki, pki.stranger), None):
        channel = (
            grpc.insecure_channel(target) if creds is None else grpc.secure_channel(target, creds)
        )
        with channel, pytest.raises(grpc.RpcError) as caught:
            ask(channel)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@contextmanager
def _mtls_serve(pki: Pki, tmp_path: Path, env: dict[str, str]) -> Iterator[ServeProcess]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    flags = ("--tls-cert", str(pki.cert), "--tls-key", str(pki.key))
    flags += ("--tls-client-ca", str(pki.client_ca_file))
    with serving(rules, *flags, "--transport", "grpcio", env=env) as server:
        yield server


def test_failed_handshakes_leave_stderr_json_only(pki: Pki, tmp_path: Path) -> None:
    """Refused handshakes write nothing of grpc-core's: every line on stderr is JSON."""
    env = {"GRPC_VERBOSITY": "", "GRPC_TRACE": ""}  # not the operator's: serve's default
    with _mtls_serve(pki, tmp_path, env) as server:
        _refused_handshakes(pki, server.grpc_target)
        with grpc.secure_channel(server.grpc_target, credentials(pki, pki.client)) as channel:
            ask(channel)  # the server lived through them
        server.process.terminate()
        server.process.wait(20)
        lines = server.text().splitlines()
        assert any('"event": "serving"' in line for line in lines)
        assert [line for line in lines if not _is_json(line)] == []


def test_a_verbosity_the_operator_set_is_kept(pki: Pki, tmp_path: Path) -> None:
    """GRPC_VERBOSITY=INFO given: grpc-core's handshake lines are written, as asked."""
    with _mtls_serve(pki, tmp_path, {"GRPC_VERBOSITY": "INFO", "GRPC_TRACE": ""}) as server:
        _refused_handshakes(pki, server.grpc_target)
        server.process.terminate()
        server.process.wait(20)
        assert "Handshake failed" in server.text()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, {"GRPC_VERBOSITY": GRPC_VERBOSITY}),
        ({"GRPC_VERBOSITY": "DEBUG"}, {"GRPC_VERBOSITY": "DEBUG"}),
        ({"GRPC_TRACE": "handshaker"}, {"GRPC_TRACE": "handshaker"}),
    ],
)
def test_quiet_grpc_core_sets_the_verbosity_only_when_unset(
    given: dict[str, str], expected: dict[str, str]
) -> None:
    """A verbosity or a trace the operator chose is left alone."""
    environ = dict(given)
    assert quiet_grpc_core(environ) == (not given)
    assert environ == expected


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
