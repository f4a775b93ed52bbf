"""Every run of `ratewarden simulate` is told apart: its rows, its figures, its length."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.cli import main


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()[1:]]


def test_a_replay_without_duration_runs_for_its_whole_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1,000 requests a second apart: all are offered (600 s cut off 400 of them)."""
    log = tmp_path / "log.txt"
    log.write_text("".join(f"{i}\n" for i in range(1000)))
    assert main(["simulate", "--pattern", f"replay:file={log}", "--algorithm", "gcra"]) == 0
    captured = capsys.readouterr()
    assert _rows(captured.out)[0][-6] == "1000"
    assert captured.err == ""


def test_a_replay_longer_than_duration_is_noted_with_what_is_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An explicit --duration shorter than the log replays its start and says so on stderr."""
    log = tmp_path / "log.txt"
    log.write_text("".join(f"{i}\n" for i in range(1000)))
    argv = ["simulate", "--pattern", f"replay:file={log}", "--algorithm", "gcra",
            "--duration", "600"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert _rows(captured.out)[0][-6] == "600"
    assert "spans 999 s; --duration 600 replays its first 600 of 1,000 requests" in captured.err


def test_a_replay_spanning_more_than_thirty_days_needs_a_duration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line 1e10 s after the first is refused by name, not dropped silently."""
    log = tmp_path / "log.txt"
    log.write_text("0\n10000000000\n")
    assert main(["simulate", "--pattern", f"replay:file={log}", "--algorithm", "gcra"]) == 2
    err = capsys.readouterr().err
    assert "spans 10,000,000,000 s, more than the 2,592,000 s (30 days)" in err
    assert "give --duration" in err


def test_poisson_seeds_and_replays_in_two_folders_get_rows_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Different traffic, different labels: the seed, and the replay's path as given."""
    for folder, step in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "t.log").write_text("".join(f"{i * step}\n" for i in range(50)))
    argv = ["simulate", "--algorithm", "gcra", "--duration", "60",
            "--pattern", "poisson:seed=1", "--pattern", "poisson:seed=2",
            "--pattern", f"replay:file={tmp_path / 'a' / 't.log'}",
            "--pattern", f"replay:file={tmp_path / 'b' / 't.log'}"]  # fmt: skip
    assert main(argv) == 0
    labels = [
        line[: line.index("gcra")].strip() for line in capsys.readouterr().out.splitlines()[1:]
    ]
    assert len(set(labels)) == 4
    assert labels[:2] == ["poisson x1", "poisson x1 seed 2"]


def test_the_same_traffic_or_rate_twice_runs_once_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """poisson and poisson:seed=1, 100/minute and 100/60s: one row each, and a note naming both."""
    argv = ["simulate", "--algorithm", "gcra", "--duration", "60",
            "--pattern", "poisson", "--pattern", "poisson:seed=1",
            "--rate", "100/minute", "--rate", "100/60s"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert len(_rows(captured.out)) == 1
    same = "--pattern 'poisson:seed=1' is the same as --pattern 'poisson' (poisson x1)"
    assert same in captured.err
    assert "--rate '100/60s' is the same as --rate '100/minute'" in captured.err


def test_two_figures_for_one_file_are_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --plot given twice, or two patterns whose names slug alike, would overwrite a figure."""
    pytest.importorskip("matplotlib")
    base = str(tmp_path / "p.png")
    twice = ["simulate", "--algorithm", "gcra", "--plot", base, "--plot", base]
    assert main(twice) == 2
    assert "would be written twice" in capsys.readouterr().err
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "t.log").write_text("0\n")
    (tmp_path / "a-t.log").write_text("0\n1\n")
    alike = ["simulate", "--algorithm", "gcra", "--plot", base,
             "--pattern", f"replay:file={tmp_path / 'a' / 't.log'}",
             "--pattern", f"replay:file={tmp_path / 'a-t.log'}"]  # fmt: skip
    assert main(alike) == 2
    captured = capsys.readouterr()
    assert "would both be written to" in captured.err
    assert captured.out == "" and not list(tmp_path.glob("*.png"))
