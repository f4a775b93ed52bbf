"""``ratewarden config check`` validates what ``serve`` loads: ``--[no-]merge-domains``,
``RATEWARDEN_MERGE_DOMAINS`` and upstream's ``MERGE_DOMAIN_CONFIG``, in serve's order."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.server import settings
from ratewarden.server.rules_source import file_variables

TWO_FILES = {
    "a.yaml": "domain: api\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
    "requests_per_unit: 1}\n",
    "b.yaml": "domain: api\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, "
    "requests_per_unit: 1}\n",
}
VARIABLES = ("RATEWARDEN_MERGE_DOMAINS", "MERGE_DOMAIN_CONFIG")


@pytest.fixture
def rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of two files naming one domain; neither variable set."""
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for name, text in TWO_FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_without_merging_the_duplicate_domain_says_how_to_merge(
    rules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1, and the message offers --merge-domains beside merging or renaming."""
    assert main(["config", "check", str(rules)]) == 1
    assert (
        f"{rules / 'b.yaml'}:1: domain: duplicate domain 'api', already defined at "
        f"{rules / 'a.yaml'}:1; merge the two files, rename one domain, or start with "
        "--merge-domains"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--merge-domains"], {}),
        ([], {"RATEWARDEN_MERGE_DOMAINS": "true"}),
        ([], {"MERGE_DOMAIN_CONFIG": "true"}),
        ([], {"RATEWARDEN_MERGE_DOMAINS": "yes", "MERGE_DOMAIN_CONFIG": "false"}),
    ],
)
def test_merged_domains_are_checked_as_serve_loads_them(
    rules: Path,
    argv: list[str],
    environ: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The flag or either variable: one domain with both files' rules, exit 0."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["config", "check", *argv, str(rules)]) == 0
    assert capsys.readouterr().out.startswith("ok: 2 files, 1 domain, 2 rules\n")


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--no-merge-domains"], {"RATEWARDEN_MERGE_DOMAINS": "true"}),
        (["--no-merge-domains"], {"MERGE_DOMAIN_CONFIG": "true"}),
        ([], {"RATEWARDEN_MERGE_DOMAINS": "false", "MERGE_DOMAIN_CONFIG": "true"}),
    ],
)
def test_the_flag_wins_over_the_variables_and_ours_over_upstreams(
    rules: Path,
    argv: list[str],
    environ: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--no-merge-domains, or RATEWARDEN_MERGE_DOMAINS=false over MERGE_DOMAIN_CONFIG: not
    merged, so the second file is a duplicate (exit 1)."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["config", "check", *argv, str(rules)]) == 1
    assert "duplicate domain 'api'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        ("RATEWARDEN_MERGE_DOMAINS", "RATEWARDEN_MERGE_DOMAINS 'maybe': must be one of"),
        ("MERGE_DOMAIN_CONFIG", "MERGE_DOMAIN_CONFIG='maybe': must be true or false"),
    ],
)
def test_a_bad_variable_exits_2_naming_it(
    rules: Path,
    variable: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A variable serve would refuse is refused here too, with serve's words."""
    monkeypatch.setenv(variable, "maybe")
    assert main(["config", "check", str(rules)]) == 2
    assert capsys.readouterr().err == f"ratewarden config check: error: {message}" + (
        " 1, true, yes, on, 0, false, no, off\n"
        if variable.startswith("RATEWARDEN")
        else " (or 1, t, 0, f)\n"
    )


def test_a_variable_only_serve_reads_does_not_fail_a_check(
    rules: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RATEWARDEN_GRPC_PORT=x stops serve, not config check: only merging is read."""
    monkeypatch.setenv("RATEWARDEN_GRPC_PORT", "x")
    assert main(["config", "check", str(rules / "a.yaml")]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("flag", [None, True, False])
@pytest.mark.parametrize("ours", [None, "true", "false", "0", "on"])
@pytest.mark.parametrize("upstream", [None, "", "true", "false", "T", "0"])
def test_check_and_serve_resolve_merging_alike(
    flag: bool | None, ours: str | None, upstream: str | None
) -> None:
    """Every combination of the flag and the two variables: check merges exactly when serve's
    Settings do."""
    environ = {
        name: value
        for name, value in zip(VARIABLES, (ours, upstream), strict=True)
        if value is not None
    }
    served = settings.resolve({"merge_domains": flag, "config_paths": ["x"]}, environ)
    flags = {"merge_domains": flag, "config_paths": ["x"]}
    checked = settings.resolve(flags, file_variables(flags, environ))
    assert checked.merge_domains is served.merge_domains
