"""``ratewarden config check`` reads rule files as ``serve`` would with the same flags and
environment: ``--config-files yaml|all`` (and envoyproxy/ratelimit's ``RUNTIME_*``, which
choose ``all``), ``--failure-mode``, and serve's warnings (entries not read, a directory with
no rule file) in its own output. Before, it read only a PATH's ``*.yaml`` files, ignored
those flags and variables, and said nothing of what it skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import resolve

#: Every variable that says where serve's rule files are or how they load.
VARIABLES = (
    "RATEWARDEN_CONFIG",
    "RATEWARDEN_CONFIG_FILES",
    "RATEWARDEN_CONFIG_XDS",
    "RATEWARDEN_FAILURE_MODE",
    "RATEWARDEN_MERGE_DOMAINS",
    "MERGE_DOMAIN_CONFIG",
    "CONFIG_TYPE",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
)
EMPTY_OUTCOME = "no rule is loaded: every domain is unknown and every call is answered OK"


def domain(name: str, mode: str = "") -> str:
    own = f", failure_mode: {mode}" if mode else ""
    return (
        f"domain: {name}\ndescriptors:\n  - key: k\n"
        f"    rate_limit: {{unit: minute, requests_per_unit: 5{own}}}\n"
    )


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the variables set unless a test sets it."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Upstream's layout, RUNTIME_ROOT/ratelimit/config: a suffixless file, a .yaml one, one
    in a subdirectory and a hidden file; the RUNTIME_* variables are not set."""
    config = tmp_path / "ratelimit" / "config"
    (config / "sub").mkdir(parents=True)
    (config / "mongo").write_text(domain("mongo_cps"))
    (config / "other.yaml").write_text(domain("other"))
    (config / "sub" / "example.yaml").write_text(domain("rl"))
    (config / ".notes.yaml").write_text("not rules")
    return config


def upstream_env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTIME_ROOT", str(root))
    monkeypatch.setenv("RUNTIME_SUBDIRECTORY", "ratelimit")


def hidden_warning(config: Path) -> str:
    return (
        f"warning: not read as rules: {config / '.notes.yaml'}: a hidden file (its name "
        "starts with a dot), not read; rename it to load it\n"
    )


def test_no_path_checks_the_runtime_directory_as_serve_reads_it(
    runtime: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RUNTIME_* and no PATH: every file there, subdirectories too (--config-files all), the
    hidden one named; before, a PATH was required and only other.yaml was read."""
    upstream_env(runtime.parent.parent, monkeypatch)
    assert main(["config", "check"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ok: 3 files, 3 domains, 3 rules\n")
    assert captured.err == hidden_warning(runtime)


@pytest.mark.parametrize("given", ["flag", "variable"])
def test_config_files_all_reads_every_file_of_a_path(
    runtime: Path, given: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--config-files all, or RATEWARDEN_CONFIG_FILES=all, on a PATH: the whole directory."""
    flags = ["--config-files", "all"] if given == "flag" else []
    if given == "variable":
        monkeypatch.setenv("RATEWARDEN_CONFIG_FILES", "all")
    assert main(["config", "check", *flags, str(runtime)]) == 0
    assert capsys.readouterr().out.startswith("ok: 3 files, 3 domains, 3 rules\n")


def test_a_path_reads_yaml_and_names_every_entry_it_skips(
    runtime: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PATH is serve's --config: its own *.yaml files, even with RUNTIME_* set (--config
    wins with its own default), and each entry not read is named with why, as serve's
    config_files_skipped warning names it."""
    upstream_env(runtime.parent.parent, monkeypatch)
    assert main(["config", "check", str(runtime)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ok: 1 file, 1 domain, 1 rule\n")
    assert captured.err == (
        hidden_warning(runtime)
        + f"warning: not read as rules: {runtime / 'mongo'}: not a *.yaml or *.yml file, not "
        "read (--config-files all reads every file, as envoyproxy/ratelimit does)\n"
        f"warning: not read as rules: {runtime / 'sub'}: a subdirectory, not read "
        "(--config-files all reads subdirectories, as envoyproxy/ratelimit does)\n"
    )


def configmap(mount: Path) -> None:
    """The kubelet's layout: the keys in ..<timestamp>/, ..data linking to it, and a visible
    link per key through ..data."""
    version = mount / "..2026_07_01_00_00_00.1"
    version.mkdir(parents=True)
    (version / "edge.yaml").write_text(domain("edge"))
    (version / "mongo").write_text(domain("mongo_cps"))
    (mount / "..data").symlink_to(version.name)
    for key in ("edge.yaml", "mongo"):
        (mount / key).symlink_to(Path("..data") / key)


def test_a_configmap_mount_is_checked_once_per_key_without_a_word_on_its_machinery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under RUNTIME_*: each key once (no duplicate domain from the hidden copy), and
    ..data / ..<timestamp> are not named; under yaml, only the suffixless key is."""
    mount = tmp_path / "ratelimit" / "config"
    configmap(mount)
    upstream_env(tmp_path, monkeypatch)
    assert main(["config", "check"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ok: 2 files, 2 domains, 2 rules\n")
    assert captured.err == ""
    assert main(["config", "check", str(mount)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ok: 1 file, 1 domain, 1 rule\n")
    assert captured.err.startswith(f"warning: not read as rules: {mount / 'mongo'}: not a")
    assert captured.err.count("\n") == 1


def test_an_empty_directory_is_an_empty_config_said_in_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 0 as serve starts on it, with serve's config_directory_empty warning; before,
    only "ok: 0 files" was printed."""
    empty = tmp_path / "rules"
    empty.mkdir()
    assert main(["config", "check", str(empty)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "ok: 0 files, 0 domains, 0 rules\n"
    assert captured.err == (
        f"warning: config directory holds no rule file: {empty}; {EMPTY_OUTCOME}\n"
    )


def test_an_empty_runtime_directory_of_a_configmap_is_an_empty_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ConfigMap emptied of keys (only ..data and its directory left), under RUNTIME_*."""
    mount = tmp_path / "ratelimit" / "config"
    (mount / "..2026_07_01_00_00_00.1").mkdir(parents=True)
    (mount / "..data").symlink_to("..2026_07_01_00_00_00.1")
    upstream_env(tmp_path, monkeypatch)
    assert main(["config", "check"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "ok: 0 files, 0 domains, 0 rules\n"
    assert (
        captured.err == f"warning: config directory holds no rule file: {mount}; {EMPTY_OUTCOME}\n"
    )


@pytest.mark.parametrize(
    ("argv", "environ", "mode"),
    [
        (["--failure-mode", "closed"], {}, "closed"),
        ([], {"RATEWARDEN_FAILURE_MODE": "local"}, "local"),
        (["--failure-mode", "closed"], {"RATEWARDEN_FAILURE_MODE": "local"}, "closed"),
    ],
)
async def test_the_failure_modes_printed_are_those_rlconfig_shows(
    tmp_path: Path,
    argv: list[str],
    environ: dict[str, str],
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--failure-mode (or its variable; the flag wins) is the mode of each rule without its
    own, and the rule lines are /rlconfig's of a server started with the same settings."""
    (tmp_path / "a.yaml").write_text(domain("plain"))
    (tmp_path / "b.yaml").write_text(domain("own", "open"))
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["config", "check", *argv, str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split("\n", 1)[1]
    assert f"plain.k: 5/minute algorithm=fixed_window failure_mode={mode}" in printed
    assert "own.k: 5/minute algorithm=fixed_window failure_mode=open" in printed
    flags = {"failure_mode": argv[1]} if argv else {}
    given = {"config_paths": [str(tmp_path)], "grpc_port": "0", "http_port": "0", **flags}
    server = RateLimitServer(resolve(given, environ))
    await server.start()
    try:
        assert printed == server.rules_text()
    finally:
        await server.stop(0)


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "no rule files given: name them (PATH...), or set RATEWARDEN_CONFIG or"),
        (
            [],
            {"CONFIG_TYPE": "GRPC_XDS_SOTW", "RUNTIME_ROOT": "/srv"},
            "serve would take its rules from an xDS server",
        ),
        (["--config-files", "some", "x"], {}, "--config-files 'some': must be one of: yaml, all"),
        (["--failure-mode", "deny", "x"], {}, "--failure-mode 'deny': must be one of: open,"),
        (["x"], {"RATEWARDEN_CONFIG_FILES": "every"}, "RATEWARDEN_CONFIG_FILES 'every': must be"),
    ],
)
def test_what_serve_would_refuse_exits_2_naming_it(
    argv: list[str],
    environ: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No rule files anywhere, rules from xDS, or a bad value: one line, exit 2."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["config", "check", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ratewarden config check: error: {message}")
    assert err.count("\n") == 1
