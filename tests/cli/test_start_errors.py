"""``ratewarden serve`` on an address it cannot listen on: a value that is no address at all
is a bad flag (exit 2, one line naming it); a real address the gRPC port cannot bind exits 1
with one line of ratewarden's own saying why (the port in use, or not this host's address),
on both transports, with no library's log line before it."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.server.settings import native_installed
from tests._servers import HOST, free_port
from tests.server_transport._process import RATEWARDEN

CONFIG = Path(__file__).parents[2] / "examples" / "ratelimit.yaml"
#: TEST-NET-1 (RFC 5737): an IP address, and never one of this host's.
NOT_OURS = "192.0.2.1"
TRANSPORTS = [
    "grpcio",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not native_installed(), reason="pygrpc-native not installed"),
    ),
]


@pytest.fixture(autouse=True)
def no_listening_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No address from the environment but the one a test sets."""
    for name in ("RATEWARDEN_HOST", "RATEWARDEN_GRPC_HOST", "HOST", "GRPC_HOST", "DEBUG_HOST"):
        monkeypatch.delenv(name, raising=False)


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    """``ratewarden serve`` on the example rules as a process: grpc-core and pygrpc-native
    write their lines to the process's stderr, which the test reads whole."""
    argv = [*RATEWARDEN, "serve", "--config", str(CONFIG), "--http-port", str(free_port())]
    return subprocess.run([*argv, *args], check=False, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("999.1.1.1", "not an IP address (IPv4 is four numbers from 0 to 255, as 127.0.0.1)"),
        ("1.2.3", "not an IP address (IPv4 is four numbers from 0 to 255, as 127.0.0.1)"),
        ("no-such-host.invalid", "not an IP address or a name this host can resolve ("),
    ],
)
def test_a_host_that_is_no_address_is_a_bad_flag_value(
    host: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--host 999.1.1.1`` exits 2 before anything binds, one line naming --host and the
    value (it exited 1 saying 'the address is in use or not available')."""
    argv = ["serve", "--config", str(CONFIG), "--grpc-port", "0", "--http-port", "0"]
    assert main([*argv, "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ratewarden serve: error: --host {host!r}: {why}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("variable", "flag", "shown"),
    [
        ("RATEWARDEN_GRPC_HOST", None, "RATEWARDEN_GRPC_HOST '999.1.1.1'"),
        ("GRPC_HOST", None, "GRPC_HOST='999.1.1.1'"),
        ("RATEWARDEN_HOST", "--debug-host", "--debug-host '999.1.1.1'"),
    ],
)
def test_every_listening_address_is_checked_naming_where_it_came_from(
    variable: str,
    flag: str | None,
    shown: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A variable's value is named by the variable; a flag's by the flag (a good --host from
    RATEWARDEN_HOST does not hide a bad --debug-host)."""
    argv = ["serve", "--config", str(CONFIG), "--grpc-port", "0", "--http-port", "0"]
    if flag is None:
        monkeypatch.setenv(variable, "999.1.1.1")
    else:
        monkeypatch.setenv(variable, HOST)
        argv += ["--debug-port", "0", flag, "999.1.1.1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ratewarden serve: error: {shown}: not an IP address")
    assert err.count("\n") == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_busy_grpc_port_is_one_line_saying_it_is_in_use(transport: str) -> None:
    """Exit 1 and ratewarden's line alone, naming the flag that gives another port: grpcio's
    said no reason (grpc-core's 'Failed to add port' line above it had one), the native
    transport's came after the package's own warning saying the same."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--transport", transport, "--host", HOST, "--grpc-port", str(port))
    assert done.returncode == 1
    assert done.stderr == (
        f"ratewarden serve: cannot listen for gRPC on {HOST}:{port}: the port is in use by "
        "another process (Address already in use); give another port with --grpc-port\n"
    )


@pytest.mark.skipif(
    Path("/proc/sys/net/ipv4/ip_nonlocal_bind").read_text().strip() != "0",
    reason="this host lets any address be bound",
)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_address_not_of_this_host_is_one_line_saying_so(transport: str) -> None:
    """An IP address this host does not have: exit 1 (the value is an address; this host is
    the wrong one), one line saying so, not 'in use or not available'."""
    port = free_port()
    done = serve("--transport", transport, "--host", NOT_OURS, "--grpc-port", str(port))
    assert done.returncode == 1
    assert done.stderr == (
        f"ratewarden serve: cannot listen for gRPC on {NOT_OURS}:{port}: {NOT_OURS} is not an "
        "address of this host (Cannot assign requested address)\n"
    )
