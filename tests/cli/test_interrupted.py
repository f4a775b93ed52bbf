"""Ctrl-C in a long command ends it with one line and exit 130 (128 + SIGINT), as a shell
reports an interrupted tool, not a KeyboardInterrupt traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: ``ratewarden`` in a fresh interpreter that says when the command has started: from inside
#: ``main``'s handling, so that the SIGINT sent on "ready" cannot land before it (it did, once
#: in a while on a busy machine, when "ready" was printed before ``main`` was called).
RUN = f"""
import sys
sys.path.insert(0, {str(SRC)!r})
from ratewarden import cli
command = cli._command
def started(argv):
    print("ready", file=sys.stderr, flush=True)
    return command(argv)
cli._command = started
sys.exit(cli.main(sys.argv[1:]))
"""


def test_ctrl_c_in_a_long_simulation_is_one_line_and_130() -> None:
    # Several seconds of work; interrupted as soon as main runs.
    args = ["simulate", "--accuracy", "--requests", "5000000", "--sources", "100"]
    process = subprocess.Popen(
        [sys.executable, "-c", RUN, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    assert process.stderr.readline() == "ready\n"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err == "ratewarden: interrupted\n"
