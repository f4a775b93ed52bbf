"""A flag given but unused, because another is missing, is told so, as a missing flag is.

``--rtt-ms`` and ``--timeout-ms`` without ``--calls-per-primary`` printed no latency row and no
hint; ``--replicas`` without ``--keys``, ``--key-length`` without ``--measure`` (and
``--max-utilization`` without ``--calls-per-primary``, ``--region-lag-ms`` without regions)
were dropped in silence. Now the plan's rows say what the figure waits for, and the command
notes on stderr a flag that no figure uses.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from ratewarden.plan import PlanInput, format_plan, plan


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"rtt_ms": 1},
         "--rtt-ms given: needs --calls-per-primary too (the service time per call)"),
        ({"rtt_ms": 1, "timeout_ms": 20},
         "--rtt-ms and --timeout-ms given: need --calls-per-primary"),
        ({"timeout_ms": 20}, "--timeout-ms given: needs --calls-per-primary too"),
        ({"calls_per_primary": 10, "timeout_ms": 20},
         "give --rtt-ms (client to Redis round trip); --timeout-ms needs it too"),
        ({"replicas": 2}, "give --keys (active keys) to size memory; --replicas 2 needs it too"),
        ({"replicas": 1, "keys": 5}, "to read MEMORY USAGE; --replicas 1 needs it too"),
    ],
)  # fmt: skip
def test_the_rows_say_what_a_given_input_waits_for(kwargs: dict[str, float], said: str) -> None:
    """Each such input gets a row (or its figure's row) naming the flag it needs."""
    assert said in format_plan(plan(PlanInput(rps=10, **kwargs)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "note"),
    [
        (["--key-length", "16"], "--key-length is used by --measure only: give --measure URL"),
        (["--max-utilization", "60%"],
         "--max-utilization is used with --calls-per-primary only: give it"),
        (["--region-lag-ms", "70"],
         "--region-lag-ms is used with --regions or --region-rate only: give one"),
    ],
)  # fmt: skip
def test_the_command_notes_a_flag_no_figure_uses(
    capsys: pytest.CaptureFixture[str], argv: list[str], note: str
) -> None:
    """Exit 0, the plan on stdout, one note on stderr."""
    assert main(["plan", "--rps", "10", *argv]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"ratewarden plan: note: {note}\n"
    assert captured.out.startswith("traffic\n")


def test_only_the_unused_flag_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    """--max-utilization with --calls-per-primary and --region-lag-ms with regions are used: the
    one note is --key-length's."""
    argv = ["plan", "--rps", "10", "--calls-per-primary", "100", "--max-utilization", "60%",
            "--regions", "2", "--sync-interval-ms", "1000", "--region-lag-ms", "70",
            "--key-length", "8"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "ratewarden plan: note: --key-length is used by --measure only: give --measure URL\n"
    )
    assert "ceil(10 / (100 x 0.6))" in captured.out
