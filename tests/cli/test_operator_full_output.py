"""An output that cannot be written for a reason other than a reader gone (a full disk:
``ratewarden plan ... > /dev/full``) ends the command with one line and exit 1, for every
command that prints, not an ``OSError`` traceback (finding 1 of the operator3 walk)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.server_transport._process import RATEWARDEN

FULL = Path("/dev/full")


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["plan", "--rps", "10"], "plan"),
        (["simulate", "--bursts", "--algorithm", "gcra"], "simulate"),
        (["config", "check", "examples/ratelimit.yaml"], "config check"),
        (["plan", "--help"], "plan"),
        (["--version"], ""),
    ],
)
def test_a_full_disk_is_one_line_and_exit_1(argv: list[str], command: str) -> None:
    """stderr is the one line naming the command and the cause; nothing else."""
    root = Path(__file__).resolve().parents[2]
    with FULL.open("w") as full:
        done = subprocess.run(
            [*RATEWARDEN, *argv],
            check=False,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
            timeout=120,
        )
    prog = f"ratewarden {command}".strip()
    assert done.stderr == f"{prog}: error: cannot write the output: No space left on device\n"
    assert done.returncode == 1
