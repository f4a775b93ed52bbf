""" "primaries needed" is its formula's value, evaluated exactly, and the plan names what it
does not use."""

from __future__ import annotations

import pytest

from ratewarden.cli import main


def _row(out: str, name: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.strip().startswith(name))
    return line.split(maxsplit=2)


@pytest.mark.parametrize(
    ("argv", "needed", "formula"),
    [
        (["--rps", "1000000000001", "--calls-per-primary", "2", "--max-utilization", "50%"],
         "1,000,000,000,001", "ceil(1,000,000,000,001 / (2 x 0.5))"),
        (["--rps", "1000000", "--calls-per-primary", "0.000001"],
         "2,000,000,000,000", "ceil(1,000,000 / (1e-06 x 0.5))"),
        (["--rps", "30000", "--calls-per-primary", "7499.99"],
         "9", "ceil(30,000 / (7,499.99 x 0.5))"),
        (["--rps", "30000", "--local-reject", "10%", "--global-share", "60%",
          "--descriptors", "1.5", "--calls-per-primary", "8100", "--max-utilization", "50%"],
         "6", "ceil(24,300 / (8,100 x 0.5))"),
        (["--rps", "1", "--global-share", "0", "--calls-per-primary", "1000"],
         "1", "max(1, ceil(0 / (1,000 x 0.5))): at least one"),
    ],
)  # fmt: skip
def test_primaries_needed_is_the_formula_it_shows(
    argv: list[str], needed: str, formula: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Huge ratios lose no primary to a relative fudge, float noise adds none, the figure has
    the formula's thousands separators, and a floor of one says so."""
    assert main(["plan", *argv]) == 0
    assert _row(capsys.readouterr().out, "needed")[1:] == [needed, formula]


def test_one_primary_is_singular(capsys: pytest.CaptureFixture[str]) -> None:
    """'1 primary cannot serve 100 calls/s', and '100 / 1 primary' per primary."""
    argv = ["plan", "--rps", "100", "--calls-per-primary", "100", "--primaries", "1",
            "--rtt-ms", "1"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "1 primary cannot serve 100 calls/s" in out
    assert "100 / 1 primary\n" in out


def test_limit_and_burst_without_a_figure_that_uses_them_are_noted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No --measure, failover lag or regions: --limit and --burst are named as unused."""
    assert main(["plan", "--rps", "1", "--burst", "5", "--limit", "10/s"]) == 0
    err = capsys.readouterr().err
    assert "note: --limit and --burst are used by --measure, --replication-lag-ms" in err
    assert main(["plan", "--rps", "1", "--limit", "10/s", "--replication-lag-ms", "5"]) == 0
    assert "--limit" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_burst_too_large_is_blamed_on_burst(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rate is fine; the burst is what is refused, and the error starts with --burst."""
    argv = ["plan", "--rps", "1"] if command == "plan" else ["simulate", "--algorithm", "gcra"]
    assert main([*argv, "--burst", "99999999999999"]) == 2
    err = capsys.readouterr().err
    assert f"ratewarden {command}: error: --burst 99999999999999: " in err
