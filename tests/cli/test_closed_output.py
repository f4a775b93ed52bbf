"""A reader that closes the output early (``ratewarden config check FILE | head -1``): every
command ends quietly, no traceback, exit 141 (128 + SIGPIPE, as a shell reports any tool
its reader left)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.server_transport._process import RATEWARDEN

#: More rule lines than a pipe's buffer holds (64 KiB on Linux), so the command is still
#: writing when the reader goes: its write then fails whatever the timing.
MANY_RULES = "domain: d\ndescriptors:\n" + "".join(
    f"  - key: key_{index}\n    rate_limit: {{unit: minute, requests_per_unit: {index + 1}}}\n"
    for index in range(3_000)
)


def read_one_line_then_close(argv: list[str]) -> tuple[bytes, int, str]:
    """Run ``ratewarden ARGV`` into a pipe, read its first line, close the pipe: the first
    line, the exit code and stderr."""
    process = subprocess.Popen([*RATEWARDEN, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read().decode()
    return first, process.wait(timeout=60), err


def closed_before_start(argv: list[str]) -> tuple[int, str]:
    """Run ``ratewarden ARGV`` with its output's reader gone before it writes anything."""
    process = subprocess.Popen([*RATEWARDEN, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    return process.returncode, err.decode()


def test_config_check_piped_into_a_reader_that_stops_after_one_line(tmp_path: Path) -> None:
    """The first line arrives, then the command stops quietly when the reader is gone."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(MANY_RULES)
    first, code, err = read_one_line_then_close(["config", "check", str(rules)])
    assert first == b"ok: 1 file, 1 domain, 3000 rules\n"
    assert err == ""
    assert code == 141


@pytest.mark.parametrize(
    "argv", [["plan", "--rps", "100"], ["simulate", "--bursts", "--algorithm", "gcra"]]
)
def test_every_command_ends_quietly_on_a_closed_output(argv: list[str]) -> None:
    """Small outputs too, written only at the flush at exit: exit 141 and an empty stderr
    (before, 'Exception ignored ... BrokenPipeError' and exit 120)."""
    code, err = closed_before_start(argv)
    assert err == ""
    assert code == 141
