"""An Envoy bootstrap given as rules (``--config examples/``, which holds envoy-rlqs.yaml
beside the rule file) is said to be one, in one line per file, by ``config check`` and
``serve`` alike: not three lines about unknown top-level keys and a missing domain."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.cli import main

EXAMPLES = Path(__file__).parents[2] / "examples"
BOOTSTRAP = EXAMPLES / "envoy-rlqs.yaml"
SAID = (
    "static_resources: this is an Envoy bootstrap (the file envoy -c reads), not a rule file; "
    "give ratewarden only rule files, of domain: and descriptors: (docs/config.md)"
)


def first_key_line(path: Path) -> int:
    """The line of the file's first top-level key (its comments come before)."""
    lines = path.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line and line[0] not in "# ")


def test_config_check_says_the_file_is_an_envoy_bootstrap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/envoy-rlqs.yaml: one error line at its first key, exit 1."""
    assert main(["config", "check", str(BOOTSTRAP)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{BOOTSTRAP}:{first_key_line(BOOTSTRAP)}: {SAID}",
        "ratewarden config check: 1 error",
    ]


def test_serve_refuses_the_examples_directory_saying_which_file_is_the_bootstrap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2 as for any rules that do not load, the one line naming envoy-rlqs.yaml."""
    argv = ["serve", "--config", str(EXAMPLES), "--grpc-port", "0", "--http-port", "0"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"ratewarden serve: {BOOTSTRAP}:{first_key_line(BOOTSTRAP)}: {SAID}\n"
    )


@pytest.mark.parametrize("key", ["admin", "node", "dynamic_resources"])
def test_any_top_level_key_of_a_bootstrap_is_recognised(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bootstrap without static_resources (admin only, say) is recognised too."""
    path = tmp_path / "envoy.yaml"
    path.write_text(f"# a bootstrap\n{key}:\n  id: x\n")
    assert main(["config", "check", str(path)]) == 1
    [line, _] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{path}:2: {key}: this is an Envoy bootstrap")


def test_a_rule_file_with_a_stray_bootstrap_key_is_a_rule_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a domain, ``admin:`` is an unknown key of a rule file, reported as such."""
    path = tmp_path / "rules.yaml"
    path.write_text("domain: d\nadmin: x\ndescriptors: []\n")
    assert main(["config", "check", str(path)]) == 1
    [line, _] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{path}:2: admin: unknown key in the top level")
