"""The mistakes a newcomer makes with ``ratewarden serve`` are answered with the fix: a rule
file given as a positional (as ``config check`` takes it) suggests ``--config PATH``,
``--port`` suggests ``--grpc-port`` and ``--http-port``, a port in use names the flag that
gives another; and ``serve --help`` starts with what is needed: ``--config`` (required) and
the rules' options first, in sections, with an example and docs/envoy.md at the end."""

from __future__ import annotations

import errno
import socket
import subprocess
from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.server.command import GROUPS, refusal
from ratewarden.server.options import OPTIONS
from tests._servers import HOST, free_port
from tests.cli.test_help import help_of
from tests.cli.test_usage_errors import refusal as refused
from tests.server_transport._process import RATEWARDEN

CONFIG = Path(__file__).parents[2] / "examples" / "ratelimit.yaml"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["serve", "examples/ratelimit.yaml"],
            "ratewarden serve: error: unexpected argument: examples/ratelimit.yaml (did you "
            "mean --config examples/ratelimit.yaml?); see ratewarden serve --help",
        ),
        (
            ["serve", "a.yaml", "b.yaml", "--grpc-port", "0"],
            "ratewarden serve: error: unexpected arguments: a.yaml b.yaml (did you mean "
            "--config a.yaml b.yaml?); see ratewarden serve --help",
        ),
        (
            ["serve", "--config", "x.yaml", "--port", "9000"],
            "ratewarden serve: error: unknown flag --port (did you mean --grpc-port or "
            "--http-port?); see ratewarden serve --help",
        ),
        (
            ["serve", "--config", "x.yaml", "--port=9000", "--redis-url", "redis://h"],
            "ratewarden serve: error: unknown flags --port (did you mean --grpc-port or "
            "--http-port?), --redis-url (did you mean --store redis://HOST:PORT?); "
            "see ratewarden serve --help",
        ),
    ],
)
def test_a_mistake_is_answered_with_the_flag_meant(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line, exit 2, the flag meant in it: --config for a positional, the port flags."""
    assert refused(argv, capsys) == line + "\n"


def test_config_check_still_takes_its_paths_as_positionals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The hint is serve's: ``config check PATH`` is how config check is given its files."""
    assert main(["config", "check", str(CONFIG)]) == 0
    assert capsys.readouterr().out.startswith("ok: 1 file")


@pytest.mark.parametrize(
    ("line", "flag"),
    [
        (
            "cannot listen for gRPC on 127.0.0.1:8081: the port is in use by another process",
            "--grpc-port",
        ),
        ("cannot listen for HTTP on 127.0.0.1:8080: Address already in use", "--http-port"),
        (
            "cannot listen for the debug port on 127.0.0.1:9000: Address already in use",
            "--debug-port",
        ),
        ("cannot listen for metrics on 127.0.0.1:9090: Address already in use", "--metrics-port"),
    ],
)
def test_a_port_in_use_names_the_flag_that_moves_it(line: str, flag: str) -> None:
    """Each port's "cannot listen" line, in use, ends with the flag of that port."""
    assert refusal(OSError(errno.EADDRINUSE, line)) == f"{line}; give another port with {flag}"


def test_a_refusal_other_than_in_use_is_left_as_it_is() -> None:
    """An address that is not this host's is fixed with a host, not a port: no port flag."""
    line = "cannot listen for gRPC on 192.0.2.1:8081: 192.0.2.1 is not an address of this host"
    assert refusal(OSError(errno.EADDRNOTAVAIL, line)) == line


def test_a_busy_http_port_names_http_port() -> None:
    """The HTTP port taken (the gRPC one free): exit 1, one line, the flag named."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--config", str(CONFIG), "--host", HOST, "--grpc-port", str(free_port())]
        done = subprocess.run(
            [*RATEWARDEN, *argv, "--http-port", str(port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"ratewarden serve: cannot listen for HTTP on {HOST}:{port}: "), line
    assert line.endswith("; give another port with --http-port"), line


def test_serve_help_says_config_is_required_and_gives_an_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A one-line usage naming --config, its help saying it is required, an example and
    docs/envoy.md at the end; --legacy-header-names takes NAMES, not a number N."""
    text = help_of(["serve"], capsys)
    lines = text.splitlines()
    assert lines[0] == (
        "usage: ratewarden serve (--config PATH... | --config-xds HOST:PORT) [--store URL] "
        "[--grpc-port N] [--http-port N] [options]"
    )
    assert "required (or --config-xds): rule files" in " ".join(text.split())
    assert "  ratewarden serve --config examples/ratelimit.yaml " in text
    assert lines[-1].endswith("docs/envoy.md")
    assert "--legacy-header-names NAMES" in text


def test_serve_help_puts_the_rules_and_the_store_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Sections in order: the rules, then the store; the xDS options come after both."""
    text = help_of(["serve"], capsys)
    titles = [f"\n{title}:\n" for title, _ in GROUPS]
    rules, store, xds = (text.index(titles[i]) for i in (0, 1, -2))
    assert titles[-2] == "\nrules from an xDS server instead of files (docs/xds.md):\n"
    assert rules < text.index("\n  --config PATH") < store < text.index("\n  --store URL") < xds
    assert text.index("\n  --xds-node-id") > xds


def test_every_serve_option_is_in_one_section() -> None:
    """A new option needs its section, or ``serve --help`` would not list it."""
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(OPTIONS)
