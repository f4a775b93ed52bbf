"""Worker processes started together, for tests that race real processes on one store."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def race(commands: Sequence[Sequence[str]]) -> list[str]:
    """Run ``python -m <command>`` for each command, all at once, and return what each printed.

    Each worker prints "ready" once connected, then waits for "go" on stdin: every one is
    ready before any is told to go, so they start as close together as they can. Each must
    exit 0; any still running when this fails is killed.
    """
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", *command],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = []
        for worker in workers:
            out, _ = worker.communicate(timeout=60)
            assert worker.returncode == 0
            outputs.append(out)
        return outputs
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(5)
