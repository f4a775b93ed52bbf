"""The metrics directory a ``--workers`` set shares, made per set and swept when left behind.

With ``--workers N`` and no ``PROMETHEUS_MULTIPROC_DIR`` of the user's, the parent makes a
temporary directory for prometheus_client's multiprocess files and removes it when the set
stops. A parent killed by SIGKILL (or the OOM killer) cannot: its directory, named after its
process id (``ratewarden-metrics-<pid>-<random>``), is removed by the next set that starts
in the same temporary directory once no process has that id. Only directories of this
pattern, owned by this user, whose process is gone, are touched.

The temporary directory is Python's (``tempfile``): ``TMPDIR``, else ``/tmp`` and the like,
the first one this user can write. None writable (a read-only root filesystem with no
writable volume) is a ``ConfigurationError`` saying what to set; a ``TMPDIR`` passed over
for another is logged (``tmpdir_not_used``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from ratewarden.errors import ConfigurationError
from ratewarden.server.stats import MULTIPROC_ENV

__all__ = ["PREFIX", "make", "sweep"]

log = logging.getLogger("ratewarden.server")

PREFIX = "ratewarden-metrics-"
_NAME = re.compile(rf"{PREFIX}(\d+)-[^/]+")


def make() -> str:
    """A new directory for this process's set, after sweeping those left by dead ones.
    ``ConfigurationError`` when there is no temporary directory to make it in."""
    try:
        base = tempfile.gettempdir()
        sweep(base)
        made = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
    except OSError as exc:
        raise ConfigurationError(
            "--workers: no writable temporary directory for the workers' shared "
            f"metrics ({exc}); set TMPDIR to a directory this user can write (under a "
            "read-only root filesystem, a writable volume such as an emptyDir), or "
            f"{MULTIPROC_ENV} to one made for them"
        ) from None
    given = os.environ.get("TMPDIR")
    if given and os.path.realpath(given) != os.path.realpath(base):
        # tempfile passes over a TMPDIR it cannot write without a word
        log.warning(
            "TMPDIR is not a directory this user can write; the workers' metrics directory "
            "is made in another",
            extra={"event": "tmpdir_not_used", "tmpdir": given, "metrics_dir": made},
        )
    return made


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
