"""What a config directory holds but the loader does not read is named, never skipped in
silence: in one ``config_files_skipped`` warning at start, at each reload, and when that set
changes between reloads."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ratewarden.server import config as rules
from ratewarden.server.config.directory import walk
from ratewarden.server.reload import ConfigWatcher, ReloadOutcome

RULES = """\
domain: {name}
descriptors:
  - key: k
    rate_limit: {{unit: minute, requests_per_unit: 5}}
"""


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[list[str]]:
    return [
        record.skipped  # type: ignore[attr-defined]
        for record in caplog.records
        if getattr(record, "event", None) == "config_files_skipped"
    ]


def test_each_entry_not_read_is_named_with_why(tmp_path: Path) -> None:
    """Another suffix, a subdirectory, a hidden file, a link to nothing and a link to a
    directory are each named; a hidden directory (a ConfigMap's ..data) is not."""
    (tmp_path / "a.yaml").write_text(RULES.format(name="a"))
    (tmp_path / "mongo").write_text(RULES.format(name="mongo"))
    (tmp_path / "sub").mkdir()
    (tmp_path / ".b.yaml").write_text(RULES.format(name="b"))
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "..2026_01_01").mkdir()
    (tmp_path / "..data").symlink_to("..2026_01_01")
    (tmp_path / "elsewhere").symlink_to(tmp_path / "sub")
    listing = walk(tmp_path)
    assert listing.files == (tmp_path / "a.yaml",)
    why = {path.name: reason for path, reason in listing.skipped}
    assert sorted(why) == [".b.yaml", "elsewhere", "gone.yaml", "mongo", "sub"]
    assert why["mongo"].startswith("not a *.yaml or *.yml file")
    assert why["sub"].startswith("a subdirectory, not read")
    assert why[".b.yaml"].startswith("a hidden file")
    assert why["gone.yaml"] == "a link to nothing"
    assert why["elsewhere"].startswith("a link to a directory, not followed")
    # Under "all" the file and the subdirectory are read; the rest is still named.
    every = walk(tmp_path, "all")
    assert [path.name for path in every.files] == ["a.yaml", "mongo"]
    assert sorted(path.name for path, _ in every.skipped) == [".b.yaml", "elsewhere", "gone.yaml"]


def test_skipped_files_are_named_at_start_and_at_each_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning names the path and the reason, at the first load and again at a reload.
    Before, the loader skipped mongo and sub/ without a word."""
    (tmp_path / "a.yaml").write_text(RULES.format(name="a"))
    (tmp_path / "mongo").write_text(RULES.format(name="mongo"))
    applied: list[rules.RateLimitConfig] = []
    watcher = ConfigWatcher([str(tmp_path)], rules.load, applied.append)
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.reload"):
        watcher.load_initial()
        (tmp_path / "b.yaml").write_text(RULES.format(name="b"))
        assert watcher.check_once() is ReloadOutcome.RELOADED
    first, again = skipped_lines(caplog)
    assert first == again == [f"{tmp_path / 'mongo'}: " + walk(tmp_path).skipped[0][1]]
    assert str(tmp_path / "mongo") in caplog.records[0].getMessage()


def test_a_skipped_file_appearing_is_named_without_a_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A README or a subdirectory added later reloads nothing (the over-limit cache stays),
    but the next poll names it, once; its removal is quiet."""
    (tmp_path / "a.yaml").write_text(RULES.format(name="a"))
    applied: list[rules.RateLimitConfig] = []
    watcher = ConfigWatcher([str(tmp_path)], rules.load, applied.append)
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.reload"):
        watcher.load_initial()
        assert skipped_lines(caplog) == []
        (tmp_path / "old").mkdir()
        (tmp_path / "old" / "b.yaml").write_text(RULES.format(name="b"))
        assert watcher.check_once() is ReloadOutcome.UNCHANGED
        assert watcher.check_once() is ReloadOutcome.UNCHANGED
        (tmp_path / "old" / "b.yaml").unlink()
        (tmp_path / "old").rmdir()
        assert watcher.check_once() is ReloadOutcome.UNCHANGED
    assert applied == []
    [named] = skipped_lines(caplog)
    assert [line.split(": ")[0] for line in named] == [str(tmp_path / "old")]
    assert watcher.skipped == ()
