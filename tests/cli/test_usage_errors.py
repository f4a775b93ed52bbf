"""A command line argparse refuses is one line, exit 2, for every command: what was wrong,
the nearest flag or choice when there is one, and where the help is; never the usage first
(41 lines of it for ``serve``)."""

from __future__ import annotations

import pytest

from ratewarden.cli import main


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["serve", "--config", "x.yaml", "--grpc-prot", "20120"],
            "ratewarden serve: error: unknown flag --grpc-prot (did you mean --grpc-port?); "
            "see ratewarden serve --help",
        ),
        (
            ["serve", "--config", "x.yaml", "--grpc-prot=20120", "--bogus"],
            "ratewarden serve: error: unknown flags --grpc-prot (did you mean --grpc-port?), "
            "--bogus; see ratewarden serve --help",
        ),
        (
            ["config", "check", "x.yaml", "--merge-domian"],
            "ratewarden config check: error: unknown flag --merge-domian (did you mean "
            "--merge-domains?); see ratewarden config check --help",
        ),
        (
            ["plan", "--rps", "100", "--descriptrs", "2"],
            "ratewarden plan: error: unknown flag --descriptrs (did you mean --descriptors?); "
            "see ratewarden plan --help",
        ),
        (
            ["serve", "--config", "x.yaml", "--grpc-port"],
            "ratewarden serve: error: argument --grpc-port: expected one argument; "
            "see ratewarden serve --help",
        ),
        (
            ["serv"],
            "ratewarden: error: argument COMMAND: invalid choice: 'serv'; did you mean 'serve'? "
            "(choose from 'serve', 'simulate', 'plan', 'config'); see ratewarden --help",
        ),
        (
            ["config", "chek", "x.yaml"],
            "ratewarden config: error: argument COMMAND: invalid choice: 'chek'; did you mean "
            "'check'? (choose from 'check'); see ratewarden config --help",
        ),
        (
            ["config", "check", "x.yaml", "--config-files"],
            "ratewarden config check: error: argument --config-files: expected one argument; "
            "see ratewarden config check --help",
        ),
        (
            ["serve", "extra", "--config", "x.yaml"],
            "ratewarden serve: error: unexpected argument: extra (did you mean --config "
            "extra?); see ratewarden serve --help",
        ),
    ],
)
def test_a_refused_command_line_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line names the flag (not the value after it), the nearest known one, and the
    command's --help; nothing comes before it."""
    assert refusal(argv, capsys) == line + "\n"


def test_a_flag_near_no_known_one_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    """--bogus is near no serve flag: none is offered (--host shares only the dashes)."""
    err = refusal(["serve", "--config", "x.yaml", "--bogus"], capsys)
    assert err == "ratewarden serve: error: unknown flag --bogus; see ratewarden serve --help\n"
