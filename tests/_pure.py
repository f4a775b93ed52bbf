"""Running a test file again without the C kernel.

A test of the memory store runs on its C kernel when it is built; ``run_pure`` runs the
same file in a child process with ``RATEWARDEN_PURE=1`` (plain Python everywhere), so one
file checks both. The child's pytest must pass and run something.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["run_pure"]


def run_pure(file: str, *pytest_args: str, timeout: float = 300) -> str:
    """Run ``file``'s tests (narrowed by ``pytest_args``) under ``RATEWARDEN_PURE=1`` and
    check they passed; returns the child's output."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, file],
        check=False,
        cwd=Path(__file__).parents[1],
        env={**os.environ, "RATEWARDEN_PURE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
    return done.stdout
