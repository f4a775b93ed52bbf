"""``server/metrics_dir``: which left-behind metrics directories a starting set removes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratewarden.server import metrics_dir


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_directories_of_dead_sets_are_removed(tmp_path: Path) -> None:
    """A directory named after a gone process is removed; one of a live process (this one,
    the test runner's parent), a file of the pattern, another prefix, and a link are kept."""
    gone = tmp_path / f"ratewarden-metrics-{dead_pid()}-abc"
    mine = tmp_path / f"ratewarden-metrics-{os.getpid()}-def"
    alive = tmp_path / f"ratewarden-metrics-{os.getppid()}-ghi"
    other = tmp_path / "ratewarden-other-1-x"
    for path in (gone, mine, alive, other):
        path.mkdir()
        (path / "counter_1.db").write_bytes(b"x")
    plain = tmp_path / f"ratewarden-metrics-{dead_pid()}-file"
    plain.write_text("not a directory")
    link = tmp_path / f"ratewarden-metrics-{dead_pid()}-link"
    link.symlink_to(other)
    assert metrics_dir.sweep(str(tmp_path)) == [str(gone)]
    assert not gone.exists()
    assert all(path.exists() for path in (mine, alive, other, plain, link))
    assert (other / "counter_1.db").exists()


def test_a_new_directory_is_named_after_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make`` makes it in the temporary directory, named after this process."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    made = Path(metrics_dir.make())
    assert made.parent == tmp_path
    assert made.name.startswith(f"ratewarden-metrics-{os.getpid()}-")
