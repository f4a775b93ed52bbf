"""What a reload says about the files it loads: the gauge that stays up while they do not
load, the failures counted in a row and in all, what each good reload put in use, and the
warning about an editor's backup beside the rules.

``ConfigWatcher`` is driven with ``check_once`` over real files; the metrics are read back
through prometheus_client's own parser, as Prometheus would.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from ratewarden.server import config
from ratewarden.server.config.directory import walk
from ratewarden.server.reload import ConfigWatcher, ReloadOutcome
from ratewarden.server.stats import ServiceStats
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED
from tests.server.test_stats import value

RULES = (
    "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
)
FAILED = "ratelimit_service_config_last_load_failed"
ERRORS = "ratelimit_service_config_load_error_total"


def rewrite(path: Path, text: str) -> None:
    """New contents, and a newer mtime, so that the next poll sees a change."""
    path.write_text(text)
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)


def logged(caplog: pytest.LogCaptureFixture, event: str) -> list[Any]:
    found = [r for r in caplog.records if getattr(r, "event", None) == event]
    caplog.clear()
    return found


def test_the_failed_load_gauge_stays_up_while_the_file_stays_broken(tmp_path: Path) -> None:
    """A broken file is tried once, so the error counter moves once; the gauge is 1 from that
    load on, however many polls find the file unchanged, and 0 again after a good load."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    watcher = ConfigWatcher([str(path)], config.load, lambda _: None, on_load=stats.config_load)
    watcher.load_initial()
    assert value(stats, FAILED) == 0
    rewrite(path, "domain: web\ndescriptors: [{key: k, nonsense: 1}]\n")
    assert watcher.check_once() is ReloadOutcome.FAILED
    for _ in range(5):
        assert watcher.check_once() is ReloadOutcome.UNCHANGED
    assert (value(stats, ERRORS), value(stats, FAILED)) == (1, 1)
    rewrite(path, RULES.replace("5}", "6}"))
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert (value(stats, ERRORS), value(stats, FAILED)) == (1, 0)


def test_failures_are_counted_in_a_row_and_in_all(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two bad edits, a good one, a bad one: the last failure is the first in a row and the
    third in all, and each log line says both."""
    caplog.set_level(logging.INFO, logger="ratewarden.server.reload")
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    watcher = ConfigWatcher([str(path)], config.load, lambda _: None)
    watcher.load_initial()
    seen = []
    for text in ("domain: [", "domain: web\ndescriptors: 3\n", RULES, "domain: {"):
        rewrite(path, text)
        watcher.check_once()
        seen += [
            (line.failures_in_a_row, line.failures_total)
            for line in logged(caplog, "config_reload_failed")
        ]
    assert seen == [(1, 1), (2, 2), (1, 3)]
    assert (watcher.failures, watcher.failures_in_a_row) == (3, 1)


def test_a_reload_says_which_domains_rules_and_files_are_now_in_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A new file's domain added: ``config_reloaded`` names what is now live, the domains
    (sorted), the number of rules and the files read."""
    caplog.set_level(logging.INFO, logger="ratewarden.server.reload")
    (tmp_path / "a.yaml").write_text(RULES)
    watcher = ConfigWatcher([str(tmp_path)], config.load, lambda _: None)
    watcher.load_initial()
    two = (
        RULES.replace("web", "api")
        + "  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
    )
    rewrite(tmp_path / "b.yaml", two)
    assert watcher.check_once() is ReloadOutcome.RELOADED
    [line] = logged(caplog, "config_reloaded")
    assert (line.domains, line.rules) == (["api", "web"], 3)
    assert line.files == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]


def test_an_editor_backup_is_named_as_one_not_sent_to_config_files_all(tmp_path: Path) -> None:
    """``a.yaml~`` and ``#a.yaml#`` are not read, and the reason says what they are: under
    ``--config-files all`` they would be read as rules (a duplicate domain), so the hint
    given to a misnamed rule file does not fit them."""
    (tmp_path / "a.yaml").write_text(RULES)
    for name in ("a.yaml~", "#a.yaml#", "a.yaml.bak", "notes.txt"):
        (tmp_path / name).write_text(RULES)
    reasons = {path.name: why for path, why in walk(tmp_path).skipped}
    for name in ("a.yaml~", "#a.yaml#", "a.yaml.bak"):
        assert reasons[name].startswith("an editor's backup or temporary file, not read")
        assert "would read it as rules too" in reasons[name]
    assert "--config-files all reads every file" in reasons["notes.txt"]
