"""The commands that need no extra run without them: ``simulate`` and ``plan`` (tables) on
the core alone, and ``serve`` / ``config`` without ``ratewarden[server]`` say what to
install in one line (exit 1), never a traceback. Each case runs ``ratewarden`` in a fresh
interpreter in which the extras' modules cannot be imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: The modules of the server and redis extras (and matplotlib's), made unimportable.
BLOCKED = ("yaml", "grpc", "envoy", "google", "prometheus_client", "redis", "hiredis", "matplotlib")

RUN = f"""
import sys
sys.path.insert(0, {str(SRC)!r})

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from ratewarden.cli import main
sys.exit(main(sys.argv[1:]))
"""


def ratewarden(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, *args], check=False, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "args", [("--help",), ("simulate", "--bursts"), ("plan", "--rps", "1"), ("simulate", "--help")]
)
def test_the_core_commands_run_without_extras(args: tuple[str, ...]) -> None:
    done = ratewarden(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("serve",),
        ("serve", "--config", "rules.yaml", "--grpc-port", "1"),
        ("config", "check", "rules.yaml"),
    ],
)
def test_serve_and_config_say_to_install_the_server_extra(args: tuple[str, ...]) -> None:
    done = ratewarden(*args)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"ratewarden {args[0]}: error: needs ratewarden[server]"), line
    assert "no module named 'yaml'" in line, line


def test_a_measure_without_redis_says_to_install_it() -> None:
    done = ratewarden("plan", "--rps", "1", "--measure", "redis://127.0.0.1:1")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "ratewarden plan: error: measure needs redis-py, which is not installed: "
        "pip install 'ratewarden[redis]' (in a clone: pip install -e '.[redis]')"
    )


def test_a_bad_flag_of_a_core_command_is_still_refused() -> None:
    """The stand-ins take any flags; the commands that are there still refuse unknown ones."""
    done = ratewarden("simulate", "--bogus")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "ratewarden simulate: error: unknown flag --bogus; see ratewarden simulate --help"
    )
