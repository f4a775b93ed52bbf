"""The commands in docs/simulate.md and docs/capacity.md run, and print what the pages show."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ratewarden.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "simulate.md", ROOT / "docs" / "capacity.md"]
_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)
_PYTHON = re.compile(r"```python\n(.*?)```", re.S)


def examples(page: Path) -> list[tuple[str, list[str]]]:
    """``(command, printed lines)`` for every ``$ ratewarden ...`` in a console block."""
    found: list[tuple[str, list[str]]] = []
    for block in _CONSOLE.findall(page.read_text(encoding="utf-8")):
        lines = block.replace("\\\n", " ").splitlines()
        for line in lines:
            if line.startswith("$ ratewarden "):
                found.append((line[2:].split("  #")[0].strip(), []))
            elif found:
                found[-1][1].append(line.rstrip())
    return found


CASES = [
    pytest.param(command, shown, id=f"{page.name}:{command[:60]}")
    for page in PAGES
    for command, shown in examples(page)
]


@pytest.mark.parametrize(("command", "shown"), CASES)
def test_the_documented_command_runs_and_prints_what_is_shown(
    command: str, shown: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 0; plots land (in tmp_path); printed output matches the page where the page shows it.

    Accuracy examples run with --requests 300000 --sources 300 appended, so the test stays fast
    (the page's figures come from the full runs it names).
    """
    argv = shlex.split(command)[1:]
    argv = [str(tmp_path / Path(a).name) if a.endswith((".png", ".svg")) else a for a in argv]
    if "--accuracy" in argv:
        argv += ["--requests", "300000", "--sources", "300"]
    assert main(argv) == 0, command
    out = capsys.readouterr().out.rstrip().splitlines()
    if "--plot" in argv:
        assert any(
            p.suffix in (".png", ".svg") and p.stat().st_size > 0 for p in tmp_path.iterdir()
        )
    if shown and "--accuracy" not in argv:
        expected = shown[shown.index("...") + 1 :] if "..." in shown else shown
        assert out[-len(expected) :] == expected


def test_there_are_examples_on_both_pages() -> None:
    """The parametrization above is not silently empty."""
    assert sum(1 for page in PAGES for _ in examples(page)) >= 8


def test_the_python_example_runs() -> None:
    """docs/simulate.md's Python block runs as written."""
    blocks = _PYTHON.findall(PAGES[0].read_text(encoding="utf-8"))
    assert blocks
    for block in blocks:
        exec(compile(block, "simulate.md", "exec"), {"print": lambda *args, **kwargs: None})
