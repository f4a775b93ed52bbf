"""``ratewarden config check``'s work, done by serve's own code: the settings resolved as
serve resolves them (flags, then the variables that say where rule files are), then serve's
first load, with the warnings it would log (entries not read, an empty directory) kept to be
printed. The command line prints and picks the exit code."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ratewarden.server import rules_source, settings
from ratewarden.server.config import RateLimitConfig
from ratewarden.server.reload import ConfigWatcher
from ratewarden.server.settings import Settings

__all__ = ["ServeWarnings", "load", "problems", "settings_for"]


class ServeWarnings(logging.Handler):
    """Within ``with``, the warnings serve logs while it loads rule files (``server/reload.py``:
    ``config_files_skipped``, ``config_directory_empty``), kept in ``lines``, one each."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.logger = logging.getLogger("ratewarden.server")

    def emit(self, record: logging.LogRecord) -> None:
        skipped = getattr(record, "skipped", None)
        if isinstance(skipped, list):  # one line per entry not read, rather than one long
            self.lines.extend(f"not read as rules: {entry}" for entry in skipped)
        else:
            self.lines.append(record.getMessage())

    def __enter__(self) -> ServeWarnings:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.logger.removeHandler(self)


def settings_for(flags: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """serve's settings from ``flags`` and the variables of ``environ`` that say where rule
    files are and how they load; ``ConfigurationError`` when they name no rule files."""
    chosen = settings.resolve(flags, rules_source.file_variables(flags, environ))
    rules_source.check_files_given(chosen)
    return chosen


def load(chosen: Settings, warnings: ServeWarnings) -> RateLimitConfig:
    """serve's own first load (app.py): the watcher names what it will not read (into
    ``warnings``), then loads; nothing to apply the rules to, a first load only returns them.
    Raises ``ConfigurationError`` (a ``ConfigError`` listing every problem) when they do not
    load."""
    load_files = rules_source.file_loader(chosen)
    watcher = ConfigWatcher(
        chosen.config_paths, load_files, lambda _: None, files=chosen.config_files
    )
    with warnings:
        return watcher.load_initial()


def problems(exc: BaseException) -> list[str]:
    """Each problem a ``ConfigError`` lists, or the error itself: one line each."""
    errors = getattr(exc, "errors", None)
    return [str(error) for error in errors] if errors else [str(exc)]
