"""Hot reload: notice that the config files changed, load them, swap the new rules in.

``ConfigWatcher`` polls: it fingerprints every config file the loader reads (path, the file it
resolves to, device, inode, mtime, size) and reloads when the fingerprint
differs from the one taken before the last load. Following symlinks to their
target catches the way Kubernetes updates a mounted ConfigMap: the visible
``rules.yaml`` is a link through ``..data``, and an update swaps ``..data`` to a
new directory in one rename, so the target path and inode change even when
mtime and size do not. Polling rather than inotify keeps it the same on every
platform and under every volume type.

A load that fails keeps the last good config: the watcher logs the errors (one
structured line, ``event=config_reload_failed``, with the failures in a row and in
all) and counts them, and does not try again until the files change once more. A
good one is logged with what is now loaded (``event=config_reloaded``: its domains,
rule count and files). Files that change while they are
being read are read again on the next poll, so a half-written file is never
applied. ``check_once`` does one poll
synchronously, so tests drive it directly instead of sleeping.

What a config directory holds but the loader does not read (``config/directory.py``:
a file of another suffix, a subdirectory, a hidden file...) is named in one warning,
``event=config_files_skipped``, at the first load, at every reload, and whenever that
set changes between reloads (such files trigger no reload of their own). A directory
that holds no rule file is a valid, empty part of the config (as envoyproxy/ratelimit
loads an empty runtime directory: every domain unknown, every call OK), said in a
warning, ``event=config_directory_empty``, at the first load and at every reload.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from ratewarden.server import heap
from ratewarden.server.config.directory import walk
from ratewarden.server.config.tree import RateLimitConfig

__all__ = ["ConfigWatcher", "ReloadOutcome", "fingerprint", "loaded", "problems", "report_load"]

log = logging.getLogger("ratewarden.server.reload")

C = TypeVar("C")

Fingerprint = tuple[tuple[object, ...], ...]


def problems(exc: Exception) -> list[str]:
    """A failed load's problems as lines: each of a ``ConfigError``'s, else the error."""
    return [str(error) for error in getattr(exc, "errors", None) or [exc]]


def report_load(on_load: Callable[[bool], None] | None, ok: bool) -> None:
    """Tell ``on_load`` how a load went; it is instrumentation: if it raises, the failure is
    logged and the load stands."""
    if on_load is None:
        return
    try:
        on_load(ok)
    except Exception:
        log.exception(
            "on_load callback failed; the load itself is unaffected",
            extra={"event": "hook_failed", "hook": "on_load"},
        )


#: The most domains and files ``loaded`` names; the rest are counted.
MOST_NAMED = 20


def loaded(config: object) -> dict[str, object]:
    """What a config holds, for the log line that says it is in use: its ``domains``
    (sorted), the number of ``rules`` and the ``files`` read, in order; past
    ``MOST_NAMED`` domains or files, the list ends with ``"... and N more"``."""
    if not isinstance(config, RateLimitConfig):
        return {}
    return {
        "domains": _named(sorted(config.domains)),
        "rules": len(config.rules),
        "files": _named(list(config.files)),
    }


def _named(names: list[str]) -> list[str]:
    if len(names) <= MOST_NAMED:
        return names
    return [*names[:MOST_NAMED], f"... and {len(names) - MOST_NAMED} more"]


class ReloadOutcome(enum.Enum):
    UNCHANGED = "unchanged"
    RELOADED = "reloaded"
    FAILED = "failed"


def fingerprint(paths: Sequence[str], files: str = "yaml") -> Fingerprint:
    """What the config looks like on disk, in a form that changes whenever a file the
    loader reads does.

    A path given as a file is that file. A directory is what ``config.load`` reads of
    it under ``--config-files files`` (``config/directory.py``: not hidden names, such
    as Kubernetes' ``..data``, whose visible links are followed instead), and where the
    directory itself resolves to (a swapped ``RUNTIME_ROOT`` link). What the loader
    skips is not part of it, so changing it reloads nothing. A path that cannot be read
    contributes its error, so a file appearing or disappearing changes the fingerprint too.
    """
    return _look(paths, files).fingerprint


@dataclass(frozen=True, slots=True)
class _Look:
    """One look at the config paths: their ``fingerprint``; what their directories hold
    that is not read (``"PATH: why"`` each); the directories given that hold no rule file."""

    fingerprint: Fingerprint
    skipped: tuple[str, ...]
    empty: tuple[str, ...]


def _look(paths: Sequence[str], files: str) -> _Look:
    entries: list[tuple[object, ...]] = []
    skipped: list[str] = []
    empty: list[str] = []
    for path in paths:
        if _entry(path, entries):
            listing = walk(Path(path), files)
            entries.append((path, "dir", os.path.realpath(path)))
            entries.extend((str(where), "unreadable", why) for where, why in listing.errors)
            for file in listing.files:
                _entry(str(file), entries)
            skipped.extend(f"{where}: {why}" for where, why in listing.skipped)
            if not listing.files and not listing.errors:
                empty.append(path)
    return _Look(tuple(entries), tuple(skipped), tuple(empty))


def _entry(path: str, entries: list[tuple[object, ...]]) -> bool:
    """Add ``path``'s entry (a file's identity and version, or its error); True if it is
    a directory, whose entries are for the caller to add."""
    try:
        info = os.stat(path)
    except OSError as exc:
        entries.append((path, "unreadable", exc.errno))
        return False
    if stat.S_ISDIR(info.st_mode):
        return True
    entries.append(
        (path, os.path.realpath(path), info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
    )
    return False


class ConfigWatcher(Generic[C]):
    """Reload ``paths`` with ``load`` when they change, and hand each good config to ``apply``.

    ``load(paths)`` must return a whole config or raise; ``apply`` must switch to
    it atomically (``RateLimitService.swap_config`` does). Counters: ``reloads``,
    ``failures`` (in all), ``failures_in_a_row`` (since the last good load);
    ``last_error`` holds the message of the latest failed load, cleared by the next
    good one. ``on_load(ok)``, if given, hears of every load
    that finished: the initial one (when it succeeds), each reload applied
    (True) and each that failed (False); the server's metrics count them.
    ``files`` is what ``load`` reads of a directory (``--config-files``), so that
    the watcher looks at the same files, and names what is not read.
    """

    def __init__(
        self,
        paths: Sequence[str],
        load: Callable[[Sequence[str]], C],
        apply: Callable[[C], None],
        on_load: Callable[[bool], None] | None = None,
        *,
        files: str = "yaml",
    ) -> None:
        self.paths = tuple(paths)
        self._load = load
        self._apply = apply
        self._on_load = on_load
        self._files = files
        self._seen: Fingerprint | None = None
        #: What the directories hold that is not read, as last said ("PATH: why" each).
        self.skipped: tuple[str, ...] = ()
        self.reloads = 0
        self.failures = 0
        self.failures_in_a_row = 0
        self.last_error: str | None = None

    def load_initial(self) -> C:
        """Load the config the server starts with; errors propagate (nothing to fall back on).

        The fingerprint is taken before reading, so a change made while loading
        is picked up by the next ``check_once``.
        """
        seen = _look(self.paths, self._files)
        self._seen = seen.fingerprint
        self._say(seen)
        config = self._load(self.paths)
        self._report(True)
        return config

    def check_once(self) -> ReloadOutcome:
        """Poll once: reload and apply if the files changed since the last load."""
        return self._finish(*self._poll())

    async def acheck_once(self) -> ReloadOutcome:
        """``check_once`` for a running server: files are read on a worker thread, and
        the new config is applied on the event loop's thread, in one step."""
        return self._finish(*await asyncio.to_thread(self._poll))

    async def run(self, interval: float) -> None:
        """``acheck_once`` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self.acheck_once()

    def _poll(self) -> tuple[ReloadOutcome, C | None]:
        seen = _look(self.paths, self._files)
        current = seen.fingerprint
        if current == self._seen:
            if seen.skipped != self.skipped:  # a file not read came or went: no reload, a word
                self._say_skipped(seen.skipped)
            return ReloadOutcome.UNCHANGED, None
        self._seen = current
        self._say(seen)
        try:
            with heap.loading():  # no full collection walks the half-built config (heap.py)
                config = self._load(self.paths)
        except Exception as exc:
            self.failures += 1
            self.failures_in_a_row += 1
            self.last_error = str(exc)
            errors = problems(exc)
            log.error(
                "config reload failed; keeping the last good config",
                extra={
                    "event": "config_reload_failed",
                    "paths": list(self.paths),
                    "errors": errors,
                    "failures_in_a_row": self.failures_in_a_row,
                    "failures_total": self.failures,
                },
            )
            self._report(False)
            return ReloadOutcome.FAILED, None
        if fingerprint(self.paths, self._files) != current:
            # Written to while we read (an editor saving in place): what we read may
            # be half a file that happens to parse. Try again on the next poll.
            self._seen = None
            return ReloadOutcome.UNCHANGED, None
        return ReloadOutcome.RELOADED, config

    def _finish(self, outcome: ReloadOutcome, config: C | None) -> ReloadOutcome:
        if config is not None:
            self._apply(config)
            self.reloads += 1
            self.failures_in_a_row = 0
            self.last_error = None
            self._report(True)
            log.info(
                "config reloaded",
                extra={
                    "event": "config_reloaded",
                    "paths": list(self.paths),
                    "reloads": self.reloads,
                    **loaded(config),
                },
            )
        return outcome

    def _report(self, ok: bool) -> None:
        report_load(self._on_load, ok)

    def _say(self, seen: _Look) -> None:
        """Before a load: what is not read, and the directories that hold no rule file."""
        self._say_skipped(seen.skipped)
        if not seen.empty:
            return
        if len(seen.empty) == len(self.paths):
            outcome = "no rule is loaded: every domain is unknown and every call is answered OK"
        else:
            outcome = "they add no rule"
        log.warning(
            "config directory holds no rule file: %s; %s",
            ", ".join(seen.empty),
            outcome,
            extra={"event": "config_directory_empty", "directories": list(seen.empty)},
        )

    def _say_skipped(self, skipped: tuple[str, ...]) -> None:
        """Name what the config directories hold that is not read (before a load)."""
        self.skipped = skipped
        if not skipped:
            return
        log.warning(
            "not read as rules: %s",
            "; ".join(skipped),
            extra={
                "event": "config_files_skipped",
                "paths": list(self.paths),
                "skipped": list(skipped),
            },
        )
