"""Worker processes share their dashboard data through files in one directory.

With ``--workers N`` a dashboard request reaches one worker, which knows only
its own traffic. Each worker therefore writes its ``LiveStats.state()`` to
``live-<pid>.json`` in the directory the workers share (the one prometheus_client
uses for multiprocess metrics) about once a second, atomically (write, then
rename), and the worker answering reads the others' files and merges them with
its own, fresh state. A worker's figures reach the page at most one publication
interval late. Files of workers that are gone stay: their totals still count,
and their per-second figures age out of the window.

The metrics named by a mapping file share what the multiprocess files lack the same
way, in ``mapped-<pid>.json`` (``kind="mapped"``; ``server/stats_mapped_shared.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["MAX_FILE_BYTES", "MAX_WORKERS", "gather", "publish"]

#: A state file larger than this is skipped (bounded reads; a real one is far smaller).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: At most this many other workers' files are read.
MAX_WORKERS = 256
# What view.render reads; a file without all of it (another version's) is skipped.
_REQUIRED = frozenset(("pid", "seconds", "totals", "modes", "top", "history_s", "top_capacity"))


def _path(directory: str, pid: int, kind: str) -> Path:
    return Path(directory) / f"{kind}-{pid}.json"


def publish(directory: str, state: dict[str, Any], kind: str = "live") -> None:
    """Write this worker's ``state`` (with its ``pid``) for the others to read."""
    pid = int(state["pid"])
    target = _path(directory, pid, kind)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(json.dumps(state, separators=(",", ":")))
    os.replace(temporary, target)


def gather(
    directory: str,
    own: dict[str, Any],
    kind: str = "live",
    required: frozenset[str] = _REQUIRED,
) -> list[dict[str, Any]]:
    """``own`` state first, then every other worker's last published one of ``kind`` (a
    file without every key in ``required`` is skipped)."""
    states = [own]
    own_name = _path(directory, int(own["pid"]), kind).name
    found = Path(directory).glob(f"{kind}-*.json")
    others = sorted(p for p in found if p.name != own_name)
    for path in others[:MAX_WORKERS]:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # removed or replaced while we looked: its next version will do
        if isinstance(state, dict) and state.keys() >= required:
            states.append(state)
    return states
