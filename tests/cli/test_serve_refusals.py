"""``ratewarden serve`` refuses to start on bad input with exit 2, whatever the input: a flag,
a variable, a store URL, and rule files that do not load or do not exist."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ratewarden.cli import main
from tests.server_transport._process import RATEWARDEN


@pytest.fixture(autouse=True)
def no_rule_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rule path from the environment but the one a test sets."""
    for name in (
        "RATEWARDEN_CONFIG",
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
    ):
        monkeypatch.delenv(name, raising=False)


def test_a_missing_config_path_is_named_by_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--config /nonexistent.yaml``: exit 2, one line naming the flag and the path."""
    missing = tmp_path / "nonexistent.yaml"
    assert main(["serve", "--config", str(missing), "--grpc-port", "0", "--http-port", "0"]) == 2
    assert capsys.readouterr().err == (
        f"ratewarden serve: error: --config {str(missing)!r}: does not exist\n"
    )


def test_a_missing_path_from_the_variable_is_named_by_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RATEWARDEN_CONFIG=/nowhere: the message names the variable, not a flag not given."""
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("RATEWARDEN_CONFIG", str(missing))
    assert main(["serve", "--grpc-port", "0", "--http-port", "0"]) == 2
    assert capsys.readouterr().err == (
        f"ratewarden serve: error: RATEWARDEN_CONFIG {str(missing)!r}: does not exist\n"
    )


def test_a_missing_runtime_directory_names_the_upstream_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """envoyproxy/ratelimit's RUNTIME_ROOT layout: its three variables are named."""
    monkeypatch.setenv("RUNTIME_ROOT", str(tmp_path / "root"))
    assert main(["serve", "--grpc-port", "0", "--http-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratewarden serve: error: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/")
    assert err.endswith(f"{str(tmp_path / 'root' / 'config')!r}: does not exist\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("domain: [\n", ":2: yaml: not valid YAML"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
         ":4: unit: invalid rate limit unit 'fortnight'"),
    ],
)  # fmt: skip
def test_rules_that_do_not_load_exit_2_listing_every_error(
    tmp_path: Path, text: str, message: str
) -> None:
    """A real process on malformed or invalid rules: exit 2 (a refusal at start, as a bad
    flag's), each error as file:line: key: reason, no traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    done = subprocess.run(
        [*RATEWARDEN, "serve", "--config", str(bad), "--grpc-port", "0", "--http-port", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"ratewarden serve: {bad}{message}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("redis://[::1", "host '[::1' is not HOST[:PORT]"),
        ("redis+sentinel://h:\u00b2/svc", "port '\u00b2' of host 'h:\u00b2'"),
        ("redis+cluster://h:\u00b2", "port '\u00b2' of host"),
        ("redis://u:top/secret@127.0.0.1:41063/0", "must be percent-encoded"),
    ],
)
def test_a_malformed_store_url_exits_2_with_one_line(
    url: str, part: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--store BAD``: exit 2, one line naming the part (no traceback, no password)."""
    config = Path(__file__).parents[2] / "examples" / "ratelimit.yaml"
    argv = ["serve", "--config", str(config), "--store", url, "--grpc-port", "0"]
    assert main([*argv, "--http-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratewarden serve: error: store URL ")
    assert err.count("\n") == 1
    assert part in err
    assert "secret" not in err
