"""The metrics directory a ``--workers`` set shares, made per set and swept when left behind.

With ``--workers N`` and no ``PROMETHEUS_MULTIPROC_DIR`` of the user's, the parent makes a
temporary directory for prometheus_client's multiprocess files and removes it when the set
stops. A parent killed by SIGKILL (or the OOM killer) cannot: its directory, named after its
process id (``ratewarden-metrics-<pid>-<random>``), is removed by the next set that starts
in the same temporary directory once no process has that id. Only directories of this
pattern, owned by this user, whose process is gone, are touched.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "make", "sweep"]

log = logging.getLogger("ratewarden.server")

PREFIX = "ratewarden-metrics-"
_NAME = re.compile(rf"{PREFIX}(\d+)-[^/]+")


def make() -> str:
    """A new directory for this process's set, after sweeping those left by dead ones."""
    sweep()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def sweep(where: str | None = None) -> list[str]:
    """Remove the directories of sets whose parent is gone; return what was removed."""
    removed: list[str] = []
    base = Path(where or tempfile.gettempdir())
    try:
        candidates = list(base.glob(f"{PREFIX}*"))
    except OSError:
        return removed
    for path in candidates:
        found = _NAME.fullmatch(path.name)
        if found is None or not _left_behind(path, int(found.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(str(path))
    if removed:
        log.info(
            "removed metrics directories of worker sets that were killed",
            extra={"event": "metrics_dirs_removed", "paths": removed},
        )
    return removed


def _left_behind(path: Path, pid: int) -> bool:
    """A directory of ours whose parent process no longer exists."""
    try:
        if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
            return False
    except OSError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's, say)
        return False
    return False
