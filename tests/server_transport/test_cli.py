"""The `ratewarden` command line: `config check` exit codes and clear errors for bad input."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from ratewarden.cli import _parser, main
from tests.server_transport._process import RATEWARDEN
from tests.server_transport.conftest import RULES

BAD = """\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: j
    surprise: true
"""


def test_config_check_of_a_valid_config_exits_0_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A valid file: exit 0, a one-line count, then one line per rule."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    assert main(["config", "check", str(rules)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ok: 1 file, 1 domain, 1 rule"
    assert out[1].startswith("transport.api_key: 3/hour")


def test_config_check_of_a_bad_config_exits_1_listing_every_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every problem is printed as file:line: key: reason on stderr, then a count; exit 1."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["config", "check", str(bad)]) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith(f"{bad}:4: unit: invalid rate limit unit 'fortnight'")
    assert lines[1].startswith(f"{bad}:6: surprise: unknown key in a descriptor")
    assert lines[-1] == "ratewarden config check: 2 errors"
    assert captured.out == ""


def test_config_check_of_a_missing_path_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path that does not exist is a config error naming the path."""
    assert main(["config", "check", str(tmp_path / "nope.yaml")]) == 1
    assert f"{tmp_path / 'nope.yaml'}: path: does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["config"], "the following arguments are required: COMMAND"),
        (["serve", "--config", "x", "--bogus"], "unknown flag --bogus"),
    ],
)
def test_bad_usage_exits_2_with_argparse_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing commands and unknown flags print the reason, exit 2."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--grpc-port", "abc"], "--grpc-port 'abc': must be a whole number from 0 to 65535"),
        (["--workers", "2"], "2 workers on the memory store"),
        (["--on-error", "maybe"], "--on-error 'maybe': must be one of: open, closed"),
        (["--store", "foo://x"], "store URL 'foo://x': scheme 'foo' is not one of redis://"),
        (["--workers", "2", "--store", "redis+cluster://"], "no host given"),
        (["--rlqs-interval", "2"], "--rlqs-interval needs --rlqs (RATEWARDEN_RLQS=true)"),
    ],
)
def test_bad_serve_values_exit_2_with_one_clear_line(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong value for a serve option exits 2 before anything starts, naming the option."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    assert main(["serve", "--config", str(rules), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratewarden serve: error: ")
    assert message in err


def test_a_bad_environment_variable_is_named_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RATEWARDEN_HTTP_PORT=-1 is reported as that variable, exit 2."""
    monkeypatch.setenv("RATEWARDEN_HTTP_PORT", "-1")
    assert main(["serve", "--config", str(tmp_path)]) == 2
    assert "RATEWARDEN_HTTP_PORT '-1': must be a whole number" in capsys.readouterr().err


def test_the_console_script_prints_no_traceback_on_bad_input() -> None:
    """The installed `ratewarden` command: bad input is one line and exit 2, never a traceback."""
    done = subprocess.run(
        [*RATEWARDEN, "serve", "--grpc-port", "99999", "--config", "x"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "ratewarden serve: error: --grpc-port '99999': must be a whole number from 0 to 65535"
    )


def test_python_dash_m_ratewarden_runs_the_same_command(tmp_path: Path) -> None:
    """`python -m ratewarden` (no script on PATH, a venv not activated) is the `ratewarden` CLI."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    by_module = subprocess.run(
        [sys.executable, "-m", "ratewarden", "config", "check", str(rules)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    by_command = subprocess.run(
        [*RATEWARDEN, "config", "check", str(rules)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert by_module.returncode == by_command.returncode == 0
    assert by_module.stdout == by_command.stdout
    assert by_module.stdout.startswith("ok: 1 file, 1 domain, 1 rule")
    bad = subprocess.run(
        [sys.executable, "-m", "ratewarden", "serve", "--grpc-port", "99999", "--config", "x"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "--grpc-port '99999'" in bad.stderr


#: Each subcommand with what it requires, so that an unknown flag is the one error left.
SUBCOMMANDS = {
    "serve": ["serve"],
    "simulate": ["simulate"],
    "plan": ["plan", "--rps", "10"],
    "config": ["config"],
    "config check": ["config", "check", "rules.yaml"],
}


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    """Every subcommand of ``parser``, nested ones included (``config check``)."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= {prefix + name} | _subcommands(sub, prefix + name + " ")
    return found


def test_the_unknown_flag_table_covers_every_subcommand() -> None:
    """A new subcommand must be added to SUBCOMMANDS, so the test below checks it too."""
    assert _subcommands(_parser()) == set(SUBCOMMANDS)


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_an_unknown_flag_is_the_subcommands_error_not_the_top_level_one(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ratewarden plan --bogus`` is plan's error: one line, its prog and its --help, exit 2
    (argparse hands a subcommand's unknown flags to the top-level parser, which named its
    own)."""
    argv = [*SUBCOMMANDS[command], "--bogus"]
    if command == "config":  # config needs a command after it: put the flag before it
        argv = ["config", "--bogus", "check", "rules.yaml"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"ratewarden {command}: error: unknown flag --bogus; see ratewarden {command} --help\n"
    )
